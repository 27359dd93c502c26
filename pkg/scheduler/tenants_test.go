package scheduler

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// An mps node serves shared pods of one namespace at a time (its one daemon's /dev/shm and control
// pipe would otherwise be shared between tenants): the extender keeps another namespace's shared pod
// off it with a reason, so the device plugin's refusal at Allocate is never reached. Two nodes in the
// same card state but held by different tenants get different verdicts; whole-card pods, pods of the
// same namespace and hami-core nodes are not restricted; the node is free for others once its
// tenant's pods are gone.
func TestMPSNodeServesSharedPodsOfOneNamespace(t *testing.T) {
	cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	mps := &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}
	cache.UpsertNode(sharingNode(t, "mps-a", mps))
	cache.UpsertNode(sharingNode(t, "mps-b", mps))
	cache.UpsertNode(sharingNode(t, "hami", &annotations.Sharing{Mode: annotations.SharingHAMiCore, Ready: true}))
	d, err := core.New(core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
	if err != nil {
		t.Fatal(err)
	}
	pod := func(ns string, shared bool) *core.Pod {
		c := annotations.ContainerRequest{Name: "m", Count: 1}
		if shared {
			c.Shared, c.MemoryMiB = true, 2000
		}
		p, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{c}}, annotations.Selector{})
		if err != nil {
			t.Fatal(err)
		}
		p.Tenant = ns
		return p
	}
	reserve := func(uid types.UID, ns string, p *core.Pod, node string) error {
		_, err := cache.Reserve(uid, ns+"/"+string(uid), p, node)
		return err
	}
	// team-a holds mps-a, team-b holds mps-b, with the same share on the same card: one card state.
	if err := reserve("a1", "team-a", pod("team-a", true), "mps-a"); err != nil {
		t.Fatal(err)
	}
	if err := reserve("b1", "team-b", pod("team-b", true), "mps-b"); err != nil {
		t.Fatal(err)
	}
	names := []string{"mps-a", "mps-b", "hami"}
	verdicts := func(p *core.Pod) []string {
		var out []string
		for _, v := range cache.Evaluate("uid-new", p, names, nil) {
			r := ""
			if v.Reason != nil {
				r = v.Reason.String()
			}
			out = append(out, r)
		}
		return out
	}
	got := verdicts(pod("team-b", true))
	if !strings.Contains(got[0], "MPS daemon serves shared pods of namespace team-a") || got[1] != "" || got[2] != "" {
		t.Fatalf("team-b's shared pod: verdicts %q, want mps-a refused naming team-a, mps-b and hami to fit", got)
	}
	if got := verdicts(pod("team-a", true)); got[0] != "" || !strings.Contains(got[1], "namespace team-b") {
		t.Fatalf("team-a's shared pod: verdicts %q, want mps-a to fit and mps-b refused naming team-b", got)
	}
	// (It waits for the in-flight shared containers, as any container of their count would.)
	if got := verdicts(pod("team-c", false)); strings.Contains(got[0], "namespace") || strings.Contains(got[1], "namespace") {
		t.Fatalf("team-c's whole-card pod: verdicts %q, want no tenant rule on either mps node", got)
	}
	// Bind decides with the same rule.
	if err := reserve("b2", "team-b", pod("team-b", true), "mps-a"); !errors.Is(err, ErrNoFit) || !strings.Contains(err.Error(), "team-a") {
		t.Fatalf("reserve team-b's shared pod on mps-a: %v, want ErrNoFit naming team-a", err)
	}
	// The tenant's pod goes: the node is anyone's again.
	cache.Release("a1")
	if got := verdicts(pod("team-b", true)); got[0] != "" {
		t.Fatalf("after team-a's pod went: mps-a %q, want it to fit", got[0])
	}
}
