package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// nodeNVL is TestLinks' node: 8 PCIe A100s with NVLink bridges between cards 0-1, 2-3, 4-5, 6-7.
const nodeNVL = "nvl-a"

// linksSim is TestLinks' simulated-NVML file. The topology puts two cards per PCIe switch, two
// switches per socket; each bridged pair shares a switch.
const linksSim = `nodes:
  nvl-a:
    - {model: "NVIDIA A100 80GB PCIe", memoryMiB: 81920, count: 8}
topology:
  nvl-a: nvlink-pairs
`

// linkNode is the node as its inventory describes it: card positions by UUID, and the links.
type linkNode struct {
	pos   map[string]int
	links map[[2]int]annotations.Link
}

// link returns the link between the cards with UUIDs a and b.
func (n *linkNode) link(a, b string) annotations.Link {
	i, j := n.pos[a], n.pos[b]
	return n.links[[2]int{min(i, j), max(i, j)}]
}

// TestLinks places multi-card pods on a node whose cards are NVLink-bridged in pairs (simulated
// NVML, topology nvlink-pairs): 2-card containers get bridged pairs even when a card of the first
// pair is taken, and a pod requiring NVLink (cardinal.io/gpu-link: nvlink) stays Pending, with a
// reason naming NVLink, while only broken pairs are free, where a pod without the requirement runs.
// Every Running container's PodResources devices equal its assignment.
//
// It needs issue #24's placement merged (pkg/scheduler: branch lcore); discovery, the simulated
// topology and the inventory's links are this branch's.
func TestLinks(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	path := filepath.Join(t.TempDir(), "links-gpus.yaml")
	if err := os.WriteFile(path, []byte(linksSim), 0o644); err != nil {
		t.Fatalf("simulation file: %v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries, SimFile: path, Nodes: []stack.NodeSpec{{Name: nodeNVL, Shares: 1}}})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	n := e.waitLinksPublished(t)
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *env, *linkNode)
	}{
		{"2-card pods get bridged pairs", testLinksBridgedPairs},
		{"a pod requiring NVLink stays Pending while only broken pairs are free", testLinksRequired},
	} {
		if !t.Run(sc.name, func(t *testing.T) {
			t.Cleanup(func() { e.deleteAll(t) })
			sc.run(t, e, n)
		}) {
			if err := e.componentsAlive(); err != nil {
				t.Fatalf("stopping after %q: %v", sc.name, err)
			}
		}
	}
}

// waitLinksPublished waits until the node's inventory lists its 8 cards and the links of all 28
// pairs, 4 of them NVLink bridges, and returns the node as the inventory describes it.
func (e *env) waitLinksPublished(t *testing.T) *linkNode {
	t.Helper()
	var n *linkNode
	stack.Wait(t, runTimeout, "node "+nodeNVL+" publishing its links", func() (bool, string, error) {
		inv, err := e.Inventory(context.Background(), nodeNVL)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: not published yet
		}
		got := &linkNode{pos: map[string]int{}, links: map[[2]int]annotations.Link{}}
		for i, g := range inv.GPUs {
			got.pos[g.UUID] = i
		}
		bridges := 0
		for _, l := range inv.Links {
			got.links[[2]int{l.A, l.B}] = l
			if l.NVLink() {
				bridges++
			}
		}
		if len(inv.GPUs) != 8 || len(inv.Links) != 28 || bridges != 4 {
			return false, fmt.Sprintf("%d cards, %d links, %d NVLink; want 8, 28, 4", len(inv.GPUs), len(inv.Links), bridges), nil
		}
		n = got
		return true, "", nil
	})
	e.WaitAdvertised(t, nodeNVL)
	return n
}

// cardAt returns the UUID of the node's card at NVML index i.
func (e *env) cardAt(t *testing.T, i int) string {
	t.Helper()
	for _, c := range e.NodeCards(nodeNVL) {
		if c.Index == i {
			return c.UUID
		}
	}
	t.Fatalf("node %s has no card %d", nodeNVL, i)
	return ""
}

// pinned is a 1-card pod on the card at NVML index i.
func (e *env) pinned(t *testing.T, name string, i int) *corev1.Pod {
	t.Helper()
	return pod(name, map[string]string{annotations.UseGPUUUID: e.cardAt(t, i)})
}

// linkedCards reports whether the one container of pod name holds two NVLink-connected cards,
// after checking its PodResources against the assignment; it returns the cards' indexes.
func (e *env) linkedCards(t *testing.T, n *linkNode, name string) (bool, [2]int) {
	t.Helper()
	h := e.truth(t, name)[name+"/main"]
	if len(h.Cards) != 2 {
		t.Fatalf("pod %s holds %d cards, want 2", name, len(h.Cards))
	}
	l := n.link(h.Cards[0].UUID, h.Cards[1].UUID)
	return l.NVLink(), [2]int{h.Cards[0].Index, h.Cards[1].Index}
}

func testLinksBridgedPairs(t *testing.T, e *env, n *linkNode) {
	// Card 0 taken: a placement blind to links would give the next pod cards 1-2, breaking two
	// bridges; the free bridged pairs are 2-3, 4-5 and 6-7.
	e.create(t, e.pinned(t, "solo", 0))
	e.waitRunning(t, "solo")
	names := names("pair", 3)
	for _, name := range names {
		e.create(t, pod(name, nil, ctr("main", gpu{cards: 2})))
		e.waitRunning(t, name) // one at a time, so each sees the cards the earlier ones took
	}
	for _, name := range names {
		linked, cards := e.linkedCards(t, n, name)
		t.Logf("%s: cards %d and %d (NVLink: %v)", name, cards[0], cards[1], linked)
		if !linked {
			t.Errorf("%s holds cards %d and %d, not NVLink-connected, while bridged pairs were free", name, cards[0], cards[1])
		}
	}
}

func testLinksRequired(t *testing.T, e *env, n *linkNode) {
	// One card of every bridged pair taken: cards 1, 3, 5, 7 are free, no two of them linked.
	var pins []string
	for i := 0; i < 8; i += 2 {
		name := fmt.Sprintf("pin-%d", i)
		e.create(t, e.pinned(t, name, i))
		pins = append(pins, name)
	}
	e.waitRunning(t, pins...)
	need := pod("need-nvlink", map[string]string{annotations.GPULink: annotations.LinkNVLink}, ctr("main", gpu{cards: 2}))
	e.create(t, need)
	msg := e.waitUnschedulable(t, need.Name)
	t.Logf("%s: %s", need.Name, msg)
	if !strings.Contains(msg, "NVLink") {
		t.Errorf("%s: the reason does not mention NVLink: %s", need.Name, msg)
	}
	// The same pod without the requirement fits on the broken pairs: the link, not the count of
	// free cards, kept the first one out.
	e.create(t, pod("any-two", nil, ctr("main", gpu{cards: 2})))
	e.waitRunning(t, "any-two")
	if linked, cards := e.linkedCards(t, n, "any-two"); linked {
		t.Errorf("any-two holds cards %d and %d, NVLink-connected, while only broken pairs were free", cards[0], cards[1])
	}
	if p := e.get(t, need.Name); p.Spec.NodeName != "" {
		t.Errorf("%s was bound to %s although no two free cards are NVLink-connected", need.Name, p.Spec.NodeName)
	}
}
