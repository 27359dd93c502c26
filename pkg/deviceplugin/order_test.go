package deviceplugin

import (
	"slices"
	"testing"
	"time"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestCreationOrderBeatsBindOrder(t *testing.T) {
	// "big" (60000 MiB) was created before "small" (10000 MiB) but bound after it. A kubelet that
	// sees both in one batch (its first list after a restart, a relist) admits "big" first; one that
	// saw them one by one admits "small" first. Steering by bind order gave "big" small's slot and
	// its 10000 MiB limit. Not certain: no steering to small's assignment; Allocate serves its best
	// guess (small's own slot, small's limits), and the kubelet's record decides at start.
	p := testPlugin(t, testCards(4, nil), 4)
	big := newPod("big", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 60000}).boundAt(3600)
	small := newPod("small", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 10000}).boundAt(3600)
	p.UpsertPod(small.obj(t)) // bound first, in the same second
	p.UpsertPod(big.obj(t))
	all := []string{annotations.SlotID(uuidOf(0), 0), annotations.SlotID(uuidOf(1), 0), annotations.SlotID(uuidOf(2), 0)}
	if got := preferIDs(t, p, all, 1); slices.Equal(got, []string{annotations.SlotID(uuidOf(1), 0)}) {
		t.Errorf("preferred steered to small's assignment %v though big may be admitted first", got)
	}
	ids := []string{annotations.SlotID(uuidOf(1), 0)}
	resp, err := allocateIDs(p, ids...)
	if err != nil {
		t.Fatal(err)
	}
	if err := startAs(p, small, "main", ids, resp); err != nil {
		t.Errorf("small, given its own slot and limits, refused at start: %v", err)
	}
	// The kubelet admitted big instead: big would start with small's 10000 MiB limit.
	wantRefusal(t, startAs(p, big, "main", ids, resp), ReasonWrongResponse, "pod default/big", "pod default/small", `CUDA_DEVICE_MEMORY_LIMIT_0="10000m" where its own is "60000m"`)

	// Created and bound in the same order: certain, and each is served its own limits.
	q := testPlugin(t, testCards(4, nil), 4)
	q.UpsertPod(newPod("big", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 60000}).obj(t))
	q.UpsertPod(newPod("small", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 10000}).obj(t))
	k := newFakeKubelet(q)
	for _, want := range []string{"60000m", "10000m"} {
		_, env, err := k.allocate(1)
		if err != nil || env[EnvMemoryLimitPrefix+"0"] != want {
			t.Errorf("limit %q, err %v; want %s", env[EnvMemoryLimitPrefix+"0"], err, want)
		}
	}
}

func TestExactMatchKeepsTheCertaintyRule(t *testing.T) {
	// Just after a restart: Cardinal's "a" (a 20000 MiB slot) and "other" (another scheduler's),
	// created and bound in the same second. The kubelet may be admitting either. Serving a's slot by
	// exact match gave it, with a's limits, to "other", and "a" then got a card with no limits. Now
	// the guess is served and the kubelet's record decides at start.
	p := testPluginListing(t, testCards(4, nil), 4)
	a := newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 20000})
	p.UpsertPod(a.obj(t))
	p.UpsertPod(newPod("other", ctr{name: "main", count: 1}).unmanaged().createdWith(a).obj(t))
	all := []string{annotations.SlotID(uuidOf(0), 0), annotations.SlotID(uuidOf(1), 0)}
	if got := preferIDs(t, p, all, 1); slices.Equal(got, []string{annotations.SlotID(uuidOf(0), 0)}) {
		t.Errorf("preferred steered to a's assignment %v though other may be admitted first", got)
	}
	ids := []string{annotations.SlotID(uuidOf(0), 0)}
	resp, err := allocateIDs(p, ids...)
	if err != nil {
		t.Fatal(err)
	}
	other := newPod("other", ctr{name: "main", count: 1}).unmanaged().createdWith(a)
	other.pod.UID = "uid-other"
	wantRefusal(t, startAs(p, other, "main", ids, resp), ReasonWrongResponse, "pod default/other", "pod default/a")
}

func TestUncertainOrderStillAdmitsInterchangeablePods(t *testing.T) {
	// Just after a restart: a whole-card Cardinal pod and another scheduler's pod, created and bound
	// in the same second. Either may come first, and both get the same answer (a whole free card, no
	// limits) as long as GetPreferredAllocation does not steer to the Cardinal pod's assignment, which
	// Allocate could not give the other pod.
	for _, cardinalFirst := range []bool{true, false} {
		p := testPluginListing(t, testCards(4, nil), 1)
		a := newPod("a", ctr{name: "main", ids: []string{uuidOf(0)}})
		other := newPod("other", ctr{name: "main", count: 1}).unmanaged().createdWith(a)
		if cardinalFirst {
			p.UpsertPod(a.obj(t))
			p.UpsertPod(other.obj(t))
		} else {
			p.UpsertPod(other.obj(t))
			p.UpsertPod(a.obj(t))
		}
		k := newFakeKubelet(p)
		for i := 0; i < 2; i++ {
			if _, env, err := k.allocate(1); err != nil || len(env) != 2 {
				t.Errorf("cardinal first %v, pod %d: env %v, err %v; want served, no limits", cardinalFirst, i, env, err)
			}
		}
	}
}

func TestCertainlyBefore(t *testing.T) {
	at := func(created, bound int64, seq uint64, listed bool) *podEntry {
		e := &podEntry{seq: seq, listed: listed}
		e.created = podEpoch.Add(time.Duration(created) * time.Second)
		e.bound = podEpoch.Add(time.Duration(bound) * time.Second)
		return e
	}
	for _, tc := range []struct {
		name string
		a, b *podEntry
		want bool
	}{
		{"created and watched first", at(0, 5, 1, false), at(1, 5, 2, false), true},
		{"created first, watched second", at(0, 5, 2, false), at(1, 5, 1, false), false},
		{"created in the same second", at(0, 5, 1, false), at(0, 6, 2, false), false},
		{"listed, bound in the same second", at(0, 5, 1, true), at(1, 5, 2, true), false},
		{"listed, bound a second earlier", at(0, 5, 2, true), at(1, 6, 1, true), true},
		{"listed, then watched", at(0, 5, 1, true), at(1, 5, 2, false), true},
		{"bound earlier but created later", at(2, 5, 1, false), at(1, 6, 2, false), false},
	} {
		if got := certainlyBefore(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: certainlyBefore = %v, want %v", tc.name, got, tc.want)
		}
	}
}
