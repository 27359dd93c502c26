package deviceplugin

import (
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestExactAssignmentIsCheckedToo(t *testing.T) {
	// A forged assignment (written through a Binding, say) names a whole card's memory and cores on
	// a slot for a container that asked for 1000 MiB: refused, not served with no limits.
	slot := annotations.SlotID(uuidOf(1), 1)
	p := testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(newPod("forged", ctr{name: "main", ids: []string{slot}, memMiB: 1000}).rawAssignment(
		`{"v":1,"node":"node-a","containers":[{"name":"main","devices":[{"uuid":"GPU-01","id":"GPU-01::1","memoryMiB":81920,"cores":100}]}]}`).obj(t))
	_, err := allocateIDs(p, slot)
	wantRefusal(t, err, ReasonUnusable, "reserves 81920 MiB and 100 % of the cores on card GPU-01", "its request asks 1000 MiB and 0 %")

	// One that reserves less than the request would let the card be over-committed: refused.
	p = testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(newPod("under", ctr{name: "main", ids: []string{slot}, memMiB: 60000}).rawAssignment(
		`{"v":1,"node":"node-a","containers":[{"name":"main","devices":[{"uuid":"GPU-01","id":"GPU-01::1","memoryMiB":1000,"cores":0}]}]}`).obj(t))
	_, err = allocateIDs(p, slot)
	wantRefusal(t, err, ReasonUnusable, "reserves 1000 MiB")

	// A consistent assignment on a card with no room beside the pods on it: refused.
	p = testPlugin(t, testCards(4, nil), 4)
	p.UpsertPod(running(t, newPod("big", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}, memMiB: 70000}), annotations.SlotID(uuidOf(1), 0)))
	p.UpsertPod(newPod("a", ctr{name: "main", ids: []string{slot}, memMiB: 40000}).obj(t))
	_, err = allocateIDs(p, slot)
	wantRefusal(t, err, ReasonCapacity, "card GPU-01 has 70000 of 81920 MiB reserved by pods default/big")
}
