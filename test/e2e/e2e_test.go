package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// The demo cluster (examples/simulated-gpus.yaml, stack.DemoNodes): node-a has 8 whole A100s, cards
// 0-3 on NUMA 0 and 4-7 on NUMA 1; node-b has 8 H100s shared by up to 8 pods each; node-c has 4
// T4s, card 3 unhealthy.
const (
	nodeA = "node-a"
	nodeB = "node-b"
	nodeC = "node-c"
)

// TestCardinal runs every scenario on one stack, in order; each leaves no pod behind.
func TestCardinal(t *testing.T) {
	root, err := stack.Root()
	if err != nil {
		t.Fatalf("%v", err)
	}
	s := stack.Start(t, stack.Options{Root: root, Bin: binaries})
	e := &env{Stack: s, client: s.Cluster.Client}
	if _, err := e.client.CoreV1().Namespaces().Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	checkStack(t, e)

	scenarios := []struct {
		name string
		run  func(*testing.T, *env)
	}{
		{"selectors", testSelectors},
		{"numa-bind", testNUMABind},
		{"node policy binpack and spread", testNodePolicy},
		{"card policy binpack and spread", testCardPolicy},
		{"shared cards with memory and cores", testShared},
		{"multi-container pod", testMultiContainer},
		{"impossible pod names each node's shortfall", testImpossible},
		{"burst of 40 identical pods on one node", testBurstIdentical},
		{"burst of mixed requests and UUID selectors on one node", testBurstMixed},
		{"extender restart during a burst", testExtenderRestart},
		{"device plugin restart", testPluginRestart},
		{"kubelet restart", testKubeletRestart},
		{"card turns unhealthy and recovers", testUnhealthy},
		{"deleting pods frees their cards", testDeleteFrees},
		{"kubectl cardinal agrees with PodResources", testKubectlCardinal},
	}
	for _, sc := range scenarios {
		if !t.Run(sc.name, func(t *testing.T) {
			t.Cleanup(func() { e.deleteAll(t) })
			sc.run(t, e)
		}) {
			// Later scenarios assume a clean cluster with every component up; a failure that left
			// it otherwise would only make them fail for the wrong reason.
			if err := e.componentsAlive(); err != nil {
				t.Fatalf("stopping after %q: %v", sc.name, err)
			}
		}
	}
}

// checkStack checks that the stack runs what the chart installs: the webhook is registered
// through the chart's configuration, with the generated CA, and the scheduler profile calls the
// extender on loopback.
func checkStack(t *testing.T, e *env) {
	t.Helper()
	mwcs, err := e.client.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list MutatingWebhookConfigurations: %v", err)
	}
	if len(mwcs.Items) != 1 || len(mwcs.Items[0].Webhooks) != 1 {
		t.Fatalf("want the chart's one MutatingWebhookConfiguration with one webhook, got %d configurations", len(mwcs.Items))
	}
	wh := mwcs.Items[0].Webhooks[0]
	if wh.ClientConfig.URL == nil || !strings.HasPrefix(*wh.ClientConfig.URL, "https://127.0.0.1:") || len(wh.ClientConfig.CABundle) == 0 {
		t.Errorf("webhook clientConfig: want a loopback URL and a CA bundle, got %+v", wh.ClientConfig)
	}
	if !strings.Contains(string(e.SchedulerConfig), "urlPrefix: "+e.ExtenderURL) {
		t.Errorf("the chart's scheduler configuration does not call the extender at %s:\n%s", e.ExtenderURL, e.SchedulerConfig)
	}
}

// healthy returns the cards that are healthy in the simulation file at start.
func healthy(cards []stack.Card) []stack.Card {
	return slices.DeleteFunc(slices.Clone(cards), func(c stack.Card) bool { return !c.Healthy })
}

// testSelectors places one pod per selector kind, alone on the cluster, and checks the card the
// kubelet gave it.
func testSelectors(t *testing.T, e *env) {
	a := e.NodeCards(nodeA)
	c := healthy(e.NodeCards(nodeC))
	cases := []struct {
		name string
		ann  map[string]string
		// want checks the one card the pod holds.
		want func(stack.Card) error
	}{
		{
			name: "by-type",
			ann:  map[string]string{annotations.UseGPUType: "A100"},
			want: func(c stack.Card) error { return expectModel(c, "NVIDIA A100-SXM4-80GB") },
		},
		{
			// Neither A100 nor H100: only node-c's T4s remain.
			name: "nouse-type",
			ann:  map[string]string{annotations.NoUseGPUType: "A100,H100"},
			want: func(c stack.Card) error { return expectModel(c, "Tesla T4") },
		},
		{
			name: "by-uuid",
			ann:  map[string]string{annotations.UseGPUUUID: a[5].UUID},
			want: func(got stack.Card) error { return expectUUID(got, a[5].UUID) },
		},
		{
			// Two of node-c's three healthy T4s excluded: the third is the only one left.
			name: "nouse-uuid",
			ann:  map[string]string{annotations.UseGPUType: "T4", annotations.NoUseGPUUUID: c[0].UUID + "," + c[1].UUID},
			want: func(got stack.Card) error { return expectUUID(got, c[2].UUID) },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e.create(t, pod(tc.name, tc.ann))
			e.waitRunning(t, tc.name)
			h := e.truth(t, tc.name)[tc.name+"/main"]
			if len(h.Cards) != 1 {
				t.Fatalf("want 1 card, the kubelet gave %v", h.IDs)
			}
			if err := tc.want(h.Cards[0]); err != nil {
				t.Errorf("%v", err)
			}
			e.delete(t, tc.name)
		})
	}
}

func expectModel(c stack.Card, model string) error {
	if c.Model != model {
		return fmt.Errorf("got card %s (%s on %s), want a %s", c.UUID, c.Model, c.Node, model)
	}
	return nil
}

func expectUUID(c stack.Card, uuid string) error {
	if c.UUID != uuid {
		return fmt.Errorf("got card %s on %s, want %s", c.UUID, c.Node, uuid)
	}
	return nil
}

// testNUMABind fills node-a so that NUMA 0 has 1 free card and NUMA 1 has 2: 3 cards on one NUMA
// node cannot be had (though 3 are free), 2 can, and must be NUMA 1's.
func testNUMABind(t *testing.T, e *env) {
	a := e.NodeCards(nodeA)
	// Cards 0-2 (NUMA 0) and 4-5 (NUMA 1) taken: free are 3 (NUMA 0), 6 and 7 (NUMA 1).
	taken := []string{a[0].UUID, a[1].UUID, a[2].UUID, a[4].UUID, a[5].UUID}
	e.create(t, pod("filler", map[string]string{annotations.UseGPUUUID: strings.Join(taken, ",")}, ctr("main", gpu{cards: 5})))
	e.waitRunning(t, "filler")
	numa := map[string]string{annotations.UseGPUType: "A100", annotations.NUMABind: "true"}
	e.create(t, pod("triple", numa, ctr("main", gpu{cards: 3})))
	msg := e.waitUnschedulable(t, "triple")
	t.Logf("triple: %s", msg)
	// node-a: 3 cards wanted on one NUMA node; NUMA 0 has 1 free, NUMA 1 has 2.
	if !strings.Contains(msg, "needs 3 cards on one NUMA node, best has 2") {
		t.Errorf("the FailedScheduling message does not give node-a's NUMA shortfall: %s", msg)
	}
	e.delete(t, "triple")
	e.create(t, pod("pair", numa, ctr("main", gpu{cards: 2})))
	e.waitRunning(t, "pair")
	h := e.truth(t, "filler", "pair")
	got := slices.Sorted(slices.Values(h["pair/main"].UUIDs()))
	want := slices.Sorted(slices.Values([]string{a[6].UUID, a[7].UUID}))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("numa-bind pair: want NUMA 1's two free cards (-want +got):\n%s", diff)
	}
}

// testNodePolicy puts one T4 pod on node-c (1 of its 3 healthy cards used, node-a empty), then
// places pods that node-a and node-c can both take: binpack picks the fuller node-c, spread the
// emptier node-a.
func testNodePolicy(t *testing.T, e *env) {
	e.create(t, pod("seed", map[string]string{annotations.UseGPUType: "T4"}))
	e.waitRunning(t, "seed")
	either := func(policy annotations.Policy) map[string]string {
		return map[string]string{annotations.NoUseGPUType: "H100", annotations.NodePolicy: string(policy)}
	}
	e.create(t, pod("binpack", either(annotations.PolicyBinpack)))
	e.waitRunning(t, "binpack")
	e.create(t, pod("spread", either(annotations.PolicySpread)))
	e.waitRunning(t, "spread")
	h := e.truth(t, "seed", "binpack", "spread")
	got := map[string]string{"binpack": h["binpack/main"].Node, "spread": h["spread/main"].Node}
	want := map[string]string{"binpack": nodeC, "spread": nodeA}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes chosen (-want +got):\n%s", diff)
	}
}

// testCardPolicy shares node-b's H100s: binpack puts a second 10 GiB pod on the first pod's card,
// spread puts a third on another card.
func testCardPolicy(t *testing.T, e *env) {
	shared := func(policy annotations.Policy) map[string]string {
		return map[string]string{annotations.UseGPUType: "H100", annotations.GPUPolicy: string(policy)}
	}
	small := ctr("main", gpu{cards: 1, memMiB: 10240})
	e.create(t, pod("first", shared(annotations.PolicyBinpack), small))
	e.waitRunning(t, "first")
	e.create(t, pod("binpack", shared(annotations.PolicyBinpack), small))
	e.waitRunning(t, "binpack")
	e.create(t, pod("spread", shared(annotations.PolicySpread), small))
	e.waitRunning(t, "spread")
	h := e.truth(t, "first", "binpack", "spread")
	first, binpack, spread := h["first/main"], h["binpack/main"], h["spread/main"]
	if first.UUIDs()[0] != binpack.UUIDs()[0] {
		t.Errorf("binpack: got card %s, want the first pod's card %s", binpack.UUIDs()[0], first.UUIDs()[0])
	}
	if first.IDs[0] == binpack.IDs[0] {
		t.Errorf("binpack: got the first pod's slot %s", first.IDs[0])
	}
	if spread.UUIDs()[0] == first.UUIDs()[0] {
		t.Errorf("spread: got the first pod's card %s, want another", first.UUIDs()[0])
	}
	e.noDoubleBooking(t, nodeB)
}

// testShared places pods asking for a share of an H100 by MiB and cores, and by percent of memory:
// each holds one share slot and the assignment reserves exactly what it asked for.
func testShared(t *testing.T, e *env) {
	h100 := map[string]string{annotations.UseGPUType: "H100"}
	e.create(t,
		pod("mem-cores", h100, ctr("main", gpu{cards: 1, memMiB: 20000, cores: 30})),
		pod("percent", h100, ctr("main", gpu{cards: 1, memPercent: 25})),
	)
	e.waitRunning(t, "mem-cores", "percent")
	h := e.truth(t, "mem-cores", "percent")
	h100Mem := e.NodeCards(nodeB)[0].MemoryMiB
	for _, tc := range []struct {
		key   string
		mem   int64
		cores int
	}{
		{"mem-cores/main", 20000, 30},
		// 25% of 81559 MiB = 20389.75, rounded down.
		{"percent/main", h100Mem * 25 / 100, 0},
	} {
		got := h[tc.key]
		if got.Node != nodeB || len(got.IDs) != 1 {
			t.Errorf("%s: want one share of an H100 on %s, got %v on %s", tc.key, nodeB, got.IDs, got.Node)
			continue
		}
		if _, slot, err := annotations.ParseDeviceID(got.IDs[0]); err != nil || slot < 0 {
			t.Errorf("%s: device %s is not a share slot (%v)", tc.key, got.IDs[0], err)
		}
		if d := got.Devices[0]; d.MemoryMiB != tc.mem || d.Cores != tc.cores {
			t.Errorf("%s: assignment reserves %d MiB and %d%% cores, want %d MiB and %d%%", tc.key, d.MemoryMiB, d.Cores, tc.mem, tc.cores)
		}
	}
	e.noDoubleBooking(t, nodeB)
}

// testMultiContainer gives two containers of one pod their own cards: the kubelet's record of each
// container equals its part of the assignment, and they share no card.
func testMultiContainer(t *testing.T, e *env) {
	e.create(t, pod("multi", map[string]string{annotations.UseGPUType: "A100"},
		ctr("trainer", gpu{cards: 2}),
		ctr("plain", gpu{}),
		ctr("evaluator", gpu{cards: 1}),
	))
	e.waitRunning(t, "multi")
	h := e.truth(t, "multi")
	trainer, evaluator := h["multi/trainer"], h["multi/evaluator"]
	if len(trainer.IDs) != 2 || len(evaluator.IDs) != 1 {
		t.Fatalf("want 2 cards for trainer and 1 for evaluator, got %v and %v", trainer.IDs, evaluator.IDs)
	}
	if _, ok := h["multi/plain"]; ok {
		t.Errorf("the container without GPUs holds %v", h["multi/plain"].IDs)
	}
	for _, id := range evaluator.IDs {
		if slices.Contains(trainer.IDs, id) {
			t.Errorf("trainer and evaluator both hold %s", id)
		}
	}
}

// testImpossible asks for 3 T4s with 16000 MiB each (a T4 has 15360): no node can, and the
// FailedScheduling message names each node's shortfall.
func testImpossible(t *testing.T, e *env) {
	e.create(t, pod("impossible", map[string]string{annotations.UseGPUType: "T4"}, ctr("main", gpu{cards: 3, memMiB: 16000})))
	msg := e.waitUnschedulable(t, "impossible")
	t.Logf("impossible: %s", msg)
	for _, want := range []struct{ node, part string }{
		{nodeA, "no card matches use-gputype=t4 (node has 8x NVIDIA A100-SXM4-80GB)"},
		{nodeB, "no card matches use-gputype=t4 (node has 8x NVIDIA H100 80GB HBM3)"},
		{nodeC, "needs 3 cards with 16000 MiB and a free slot; 0 of 3 have"},
	} {
		if !strings.Contains(msg, want.part) {
			t.Errorf("the FailedScheduling message lacks %s's shortfall %q:\n%s", want.node, want.part, msg)
		}
	}
	if !strings.HasPrefix(msg, "0/3 nodes are available") {
		t.Errorf("want the scheduler's summary of 3 nodes, got %q", msg)
	}
}

// testBurstIdentical creates 40 identical pods at once, all of which only node-b can take.
func testBurstIdentical(t *testing.T, e *env) {
	ns := names("burst", 40)
	var pods []*corev1.Pod
	for _, n := range ns {
		// 40 of the 64 slots (8 cards × 8); 8 × 8000 MiB = 64000 ≤ 81559 and 8 × 10% ≤ 100% per card.
		pods = append(pods, pod(n, map[string]string{annotations.UseGPUType: "H100"}, ctr("main", gpu{cards: 1, memMiB: 8000, cores: 10})))
	}
	e.create(t, pods...)
	e.waitRunning(t, ns...)
	e.truth(t, ns...)
	e.noDoubleBooking(t, nodeB)
}

// mixedBurst is a burst of different requests and UUID selectors that only node-b can take. Pods
// without a UUID selector keep off card 3, which three pods ask for by UUID: otherwise the whole-card
// pod, or 8 other pods filling its 8 slots, could take it first and leave them Pending, rightly.
func mixedBurst(e *env, prefix string) []*corev1.Pod {
	b := e.NodeCards(nodeB)
	h100 := map[string]string{annotations.UseGPUType: "H100", annotations.NoUseGPUUUID: b[3].UUID}
	var pods []*corev1.Pod
	add := func(kind string, n int, ann map[string]string, g gpu) {
		for i := range n {
			pods = append(pods, pod(fmt.Sprintf("%s-%s-%d", prefix, kind, i), ann, ctr("main", g)))
		}
	}
	add("mem", 4, h100, gpu{cards: 1, memMiB: 10000})
	add("cores", 4, h100, gpu{cards: 1, cores: 25})
	add("pair", 3, h100, gpu{cards: 2, memMiB: 5000})
	add("whole", 1, h100, gpu{cards: 1})
	add("card3", 3, map[string]string{annotations.UseGPUUUID: b[3].UUID}, gpu{cards: 1, memMiB: 4000})
	add("not01", 3, map[string]string{annotations.UseGPUType: "H100", annotations.NoUseGPUUUID: b[0].UUID + "," + b[1].UUID}, gpu{cards: 1, memPercent: 10})
	return pods
}

func podNames(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// checkMixed checks the selectors of a mixed burst against the cards held.
func checkMixed(t *testing.T, e *env, prefix string, h map[string]held) {
	t.Helper()
	b := e.NodeCards(nodeB)
	for key, got := range h {
		switch {
		case strings.HasPrefix(key, prefix+"-card3-"):
			if got.UUIDs()[0] != b[3].UUID {
				t.Errorf("%s: got card %s, want %s", key, got.UUIDs()[0], b[3].UUID)
			}
		case strings.HasPrefix(key, prefix+"-not01-"):
			if u := got.UUIDs()[0]; u == b[0].UUID || u == b[1].UUID {
				t.Errorf("%s: got excluded card %s", key, u)
			}
		}
	}
}

// testBurstMixed creates a mixed burst at once on node-b and checks every container and card.
func testBurstMixed(t *testing.T, e *env) {
	pods := mixedBurst(e, "mixed")
	e.create(t, pods...)
	ns := podNames(pods)
	e.waitRunning(t, ns...)
	checkMixed(t, e, "mixed", e.truth(t, ns...))
	e.noDoubleBooking(t, nodeB)
}

// testExtenderRestart restarts the extender while a burst is being scheduled: it rebuilds its
// state from the API server and every pod ends up with its own cards.
func testExtenderRestart(t *testing.T, e *env) {
	pods := mixedBurst(e, "restart")
	half := len(pods) / 2
	e.create(t, pods[:half]...)
	// Restart as soon as the first pod is bound: the rest of the first half is in the middle of
	// scheduling, the second half arrives while the extender is down or starting.
	stack.Wait(t, runTimeout, "a first pod bound", func() (bool, string, error) {
		for _, p := range pods[:half] {
			got, err := e.client.CoreV1().Pods(namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
			if err != nil {
				return false, "", err
			}
			if got.Spec.NodeName != "" {
				return true, "", nil
			}
		}
		return false, "none bound", nil
	})
	e.Extender.Restart(t)
	e.create(t, pods[half:]...)
	e.WaitHTTP(t, e.Extender, e.ExtenderURL+"/readyz")
	ns := podNames(pods)
	e.waitRunning(t, ns...)
	checkMixed(t, e, "restart", e.truth(t, ns...))
	e.noDoubleBooking(t, nodeB)
}

// testPluginRestart restarts node-a's device plugin under a running pod: the pod keeps its cards,
// the plugin registers again, and a new pod gets other cards.
func testPluginRestart(t *testing.T, e *env) {
	ann := map[string]string{annotations.UseGPUType: "A100"}
	e.create(t, pod("before", ann, ctr("main", gpu{cards: 2})))
	e.waitRunning(t, "before")
	before := e.truth(t, "before")["before/main"]
	e.RestartPlugin(t, nodeA)
	e.create(t, pod("after", ann, ctr("main", gpu{cards: 2})))
	e.waitRunning(t, "after")
	h := e.truth(t, "before", "after")
	if diff := cmp.Diff(before.IDs, h["before/main"].IDs); diff != "" {
		t.Errorf("the running pod's devices changed across the plugin restart (-before +after):\n%s", diff)
	}
	e.noDoubleBooking(t, nodeA)
}

// testKubeletRestart restarts node-c's kubelet: the running pod keeps its card in the kubelet's
// record, the plugin registers with the new kubelet, and a new pod gets another card.
func testKubeletRestart(t *testing.T, e *env) {
	ann := map[string]string{annotations.UseGPUType: "T4"}
	e.create(t, pod("before", ann))
	e.waitRunning(t, "before")
	before := e.truth(t, "before")["before/main"]
	e.RestartKubelet(t, nodeC)
	e.create(t, pod("after", ann))
	e.waitRunning(t, "after")
	h := e.truth(t, "before", "after")
	if diff := cmp.Diff(before.IDs, h["before/main"].IDs); diff != "" {
		t.Errorf("the running pod's devices changed across the kubelet restart (-before +after):\n%s", diff)
	}
	if h["after/main"].IDs[0] == before.IDs[0] {
		t.Errorf("the new pod got the running pod's card %s", before.IDs[0])
	}
}

// testUnhealthy marks node-a's card 7 unhealthy in the simulation file: the kubelet stops
// advertising it, a pod asking for it by UUID stays Pending with the reason, and once the card is
// healthy again the pod runs on it.
func testUnhealthy(t *testing.T, e *env) {
	card := e.NodeCards(nodeA)[7]
	e.SetHealth(t, card.UUID, false)
	t.Cleanup(func() { e.SetHealth(t, card.UUID, true) })
	e.create(t, pod("wants-7", map[string]string{annotations.UseGPUUUID: card.UUID}))
	msg := e.waitUnschedulable(t, "wants-7")
	t.Logf("wants-7: %s", msg)
	if !strings.Contains(msg, "GPU "+card.UUID+" is unhealthy") {
		t.Errorf("the FailedScheduling message does not say %s is unhealthy: %s", card.UUID, msg)
	}
	e.SetHealth(t, card.UUID, true)
	e.waitRunning(t, "wants-7")
	if got := e.truth(t, "wants-7")["wants-7/main"].UUIDs(); !slices.Equal(got, []string{card.UUID}) {
		t.Errorf("got cards %v, want %s", got, card.UUID)
	}
}

// testDeleteFrees fills node-a's 8 cards with two 4-card pods; a third pod waits until one of
// them is deleted, then runs on a card the deleted pod held.
func testDeleteFrees(t *testing.T, e *env) {
	ann := map[string]string{annotations.UseGPUType: "A100"}
	e.create(t, pod("full-0", ann, ctr("main", gpu{cards: 4})), pod("full-1", ann, ctr("main", gpu{cards: 4})))
	e.waitRunning(t, "full-0", "full-1")
	h := e.truth(t, "full-0", "full-1")
	e.create(t, pod("waiting", ann))
	msg := e.waitUnschedulable(t, "waiting")
	t.Logf("waiting: %s", msg)
	// node-a's 8 cards are all allocated: kube-scheduler's own resource check says so first.
	if !strings.Contains(msg, "Insufficient "+string(e.Names.GPU)) {
		t.Errorf("want node-a's reason to say its cards are all in use: %s", msg)
	}
	e.delete(t, "full-0")
	e.waitRunning(t, "waiting")
	got := e.truth(t, "waiting")["waiting/main"].UUIDs()
	if len(got) != 1 || !slices.Contains(h["full-0/main"].UUIDs(), got[0]) {
		t.Errorf("waiting pod got %v, want one of the deleted pod's cards %v", got, h["full-0/main"].UUIDs())
	}
	e.noDoubleBooking(t, nodeA)
}
