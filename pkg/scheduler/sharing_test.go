package scheduler

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// sharingNode is a node of two shared A40s whose inventory reports sharing s.
func sharingNode(t *testing.T, name string, s *annotations.Sharing) *corev1.Node {
	t.Helper()
	n := gpuNode(nodeSpec{name: name, model: a40, memMiB: 46068, count: 2, shares: 4})
	inv, err := annotations.DecodeInventory(n.Annotations[annotations.GPUInventory])
	if err != nil {
		t.Fatal(err)
	}
	inv.Sharing = s
	if n.Annotations[annotations.GPUInventory], err = annotations.EncodeInventory(inv); err != nil {
		t.Fatal(err)
	}
	return n
}

// Nodes with the same cards but another sharing state get their own verdict (the cache's key and
// its change detection include the sharing field).
func TestCacheSharingStateDecidesShares(t *testing.T) {
	cache := NewCache(annotations.DefaultResourceNames(), "cardinal-scheduler")
	cache.UpsertNode(sharingNode(t, "ready", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}))
	cache.UpsertNode(sharingNode(t, "down", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: false}))
	cache.UpsertNode(sharingNode(t, "none", nil))
	d, err := core.New(core.Options{NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack, RequireEnforcedSharing: true})
	if err != nil {
		t.Fatal(err)
	}
	share, err := d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "m", Count: 1, Shared: true, MemoryMiB: 2000}}}, annotations.Selector{})
	if err != nil {
		t.Fatal(err)
	}
	verdicts := func() map[string]string {
		out := map[string]string{}
		names := []string{"ready", "down", "none"}
		for i, v := range cache.Evaluate("uid-p", share, names, nil) {
			out[names[i]] = ""
			if v.Reason != nil {
				out[names[i]] = v.Reason.String()
			}
		}
		return out
	}
	got := verdicts()
	if got["ready"] != "" || got["down"] == "" || got["none"] == "" {
		t.Fatalf("verdicts %q: want ready to fit, down (mps not ready) and none (required) refused", got)
	}
	// The daemon comes back: the same cards, another sharing state, a new verdict.
	cache.UpsertNode(sharingNode(t, "down", &annotations.Sharing{Mode: annotations.SharingMPS, Ready: true}))
	if got := verdicts(); got["down"] != "" {
		t.Fatalf("after the daemon came back: %q", got["down"])
	}
}
