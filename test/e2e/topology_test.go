package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// topologyNodes are the kubelets of TestTopology, one per TopologyManager policy (and pod scope
// once), all with the static CPU manager on 2 NUMA nodes x 8 CPUs (CPU 0 reserved: NUMA 0 has 7
// CPUs for exclusive use, NUMA 1 has 8) and 4 cards per NUMA node (cards 0-3 on NUMA 0).
func topologyNodes() []tmNode {
	return []tmNode{
		{"tm-best-effort", annotations.TopologyPolicyBestEffort, annotations.TopologyScopeContainer},
		{"tm-restricted", annotations.TopologyPolicyRestricted, annotations.TopologyScopeContainer},
		{"tm-single", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopeContainer},
		{"tm-single-pod", annotations.TopologyPolicySingleNUMANode, annotations.TopologyScopePod},
	}
}

// The scenarios of issue #14, in the order each node runs them; each starts on an empty node and
// builds the situation it names with earlier pods. The kubelet picks, among NUMA nodes that can
// hold a container, the narrowest and then the lowest: 1-card pods go to NUMA 0 while it has a
// free card, whatever the scheduler wanted.
const (
	scUUID        = "use-gpuuuid card on NUMA 1, NUMA 0 has free cards"
	scCards       = "1- and 2-card pods, binpack and spread"
	scFragmented  = "2-card pod, one free card on each NUMA node"
	scGuaranteed  = "Guaranteed 2 cards + 6 CPUs, fit only on NUMA 1"
	scNoFit       = "Guaranteed 2 cards + 6 CPUs, fit on no NUMA node"
	scInit        = "init container + app container, two Guaranteed containers"
	scSharedSlots = "shared slots (shares 2), one Guaranteed"
)

// scenarioOrder is the table's row order.
var scenarioOrder = []string{scUUID, scCards, scFragmented, scGuaranteed, scNoFit, scInit, scSharedSlots}

// anyNUMA: the scenario does not build on where the cards go.
const anyNUMA = -1

// one is a container asking n whole cards.
func one(name string, n int64) tmCtr { return tmCtr{name: name, cards: n} }

// wholeCardScenarios run on every node with whole cards (shares 1).
func wholeCardScenarios(t *testing.T, r *nodeRun) {
	refuses := wantRunning // what Cardinal does with a pod no NUMA node can hold aligned
	if r.node.demandsAlignment() {
		refuses = wantPending
	}
	group := func(name string, f func(t *testing.T)) {
		t.Run(name, func(t *testing.T) {
			t.Cleanup(func() { r.cleanup(t) })
			f(t)
		})
	}
	group("uuid", func(t *testing.T) {
		// Empty node: the kubelet takes the card from NUMA 0, so card 5 (NUMA 1) cannot be had.
		r.run(t, scUUID, tmPod{name: "uuid-numa1", useCard: 5, ctrs: []tmCtr{one("main", 1)}, want: wantPending, numa: anyNUMA})
	})
	group("cards", func(t *testing.T) {
		r.run(t, scCards,
			tmPod{name: "one-bp", gpuPolicy: annotations.PolicyBinpack, useCard: -1, ctrs: []tmCtr{one("main", 1)}, numa: 0}, // NUMA 0: 3 free
			tmPod{name: "one-sp", gpuPolicy: annotations.PolicySpread, useCard: -1, ctrs: []tmCtr{one("main", 1)}, numa: 0},  // 2 free
			tmPod{name: "two-bp", gpuPolicy: annotations.PolicyBinpack, useCard: -1, ctrs: []tmCtr{one("main", 2)}, numa: 0}, // 0 free
			tmPod{name: "two-sp", gpuPolicy: annotations.PolicySpread, useCard: -1, ctrs: []tmCtr{one("main", 2)}, numa: 1},  // NUMA 1: 2 free
			tmPod{name: "one-fill", useCard: -1, ctrs: []tmCtr{one("main", 1)}, numa: 1},                                     // 1 free
		)
		r.deletePod(t, "one-bp") // NUMA 0: 1 free, NUMA 1: 1 free
		// No NUMA node has 2 free cards: restricted and single-numa-node refuse, best-effort
		// spans both.
		r.run(t, scFragmented, tmPod{name: "two-frag", useCard: -1, ctrs: []tmCtr{one("main", 2)}, want: refuses, numa: anyNUMA})
	})
	group("guaranteed", func(t *testing.T) {
		// 3 exclusive CPUs on NUMA 0 leave it 4 of 7: 4 cards but too few CPUs.
		r.run(t, scGuaranteed, tmPod{name: "cpu-hog", cpuOnly: true, guaranteed: true, useCard: -1,
			ctrs: []tmCtr{{name: "main", cpus: 3}}, numa: 0})
		r.run(t, scGuaranteed, tmPod{name: "guaranteed-numa1", guaranteed: true, useCard: -1,
			ctrs: []tmCtr{{name: "main", cards: 2, cpus: 6}}, numa: 1}) // NUMA 1: 2 cards, 2 CPUs left
		// NUMA 0: 4 cards, 4 CPUs; NUMA 1: 2 cards, 2 CPUs.
		r.run(t, scNoFit, tmPod{name: "guaranteed-nofit", guaranteed: true, useCard: -1,
			ctrs: []tmCtr{{name: "main", cards: 2, cpus: 6}}, want: refuses, numa: anyNUMA})
	})
	group("init", func(t *testing.T) {
		r.run(t, scInit,
			tmPod{name: "init-app", useCard: -1, init: []tmCtr{one("init", 1)}, ctrs: []tmCtr{one("main", 1)}, numa: 0},
			tmPod{name: "init-app-g", guaranteed: true, useCard: -1,
				init: []tmCtr{{name: "init", cards: 2, cpus: 2}}, ctrs: []tmCtr{{name: "main", cards: 2, cpus: 4}}, numa: 0},
			// The app container takes 1 of the init container's 2 cards: the kubelet's pick.
			tmPod{name: "init-subset-g", guaranteed: true, useCard: -1, reusesSubset: true,
				init: []tmCtr{{name: "init", cards: 2, cpus: 2}}, ctrs: []tmCtr{{name: "main", cards: 1, cpus: 2}}, numa: anyNUMA},
			tmPod{name: "two-ctr-g", guaranteed: true, useCard: -1,
				ctrs: []tmCtr{{name: "a", cards: 1, cpus: 2}, {name: "b", cards: 1, cpus: 2}}, numa: anyNUMA},
		)
	})
}

// sharedScenarios run on every node with 2 slots per card.
func sharedScenarios(t *testing.T, r *nodeRun) {
	t.Cleanup(func() { r.cleanup(t) })
	shared := tmCtr{name: "main", cards: 1, memMiB: 20000}
	sharedG := tmCtr{name: "main", cards: 1, memMiB: 20000, cpus: 4}
	r.run(t, scSharedSlots,
		tmPod{name: "shared-a", useCard: -1, ctrs: []tmCtr{shared}, numa: 0},
		tmPod{name: "shared-b", useCard: -1, gpuPolicy: annotations.PolicySpread, ctrs: []tmCtr{shared}, numa: 0},
		tmPod{name: "shared-g", useCard: -1, guaranteed: true, ctrs: []tmCtr{sharedG}, numa: 0},
	)
}

// TestTopology runs issue #14's scenarios on kubelets with TopologyManager policies, first through
// Cardinal, then the same pods with plain kube-scheduler (nvidia.com/gpu an extended resource, no
// Cardinal), and reports how many pods each got refused by the kubelet at admission. Cardinal's
// must be none: every pod Running or Pending with a reason naming the kubelet, every container's
// PodResources devices equal to its assignment, and, where the policy demands it, its exclusive
// CPUs on its cards' NUMA node.
func TestTopology(t *testing.T) {
	started := time.Now()
	nodes := topologyNodes()
	e := startTopologyStack(t, nodes)

	y := &tally{}
	perNode := func(mode runMode, f func(*testing.T, *nodeRun)) func(*testing.T) {
		return func(t *testing.T) {
			for _, n := range nodes {
				t.Run(n.name, func(t *testing.T) {
					t.Parallel() // one node each; the nodes share nothing but the control plane
					f(t, newNodeRun(t, e, mode, n, y))
				})
			}
		}
	}
	alive := func(after string) {
		if err := e.componentsAlive(); err != nil {
			t.Fatalf("stopping after %s: %v", after, err)
		}
	}

	t.Run("cardinal/whole cards", perNode(modeCardinal, wholeCardScenarios))
	alive("Cardinal's whole-card scenarios")
	setShares(t, e, nodes, 2)
	t.Run("cardinal/shared slots", perNode(modeCardinal, sharedScenarios))
	alive("Cardinal's shared-slot scenarios")

	startPlainScheduler(t, e.Cluster)
	t.Run("plain/shared slots", perNode(modePlain, sharedScenarios))
	alive("the plain shared-slot scenarios")
	setShares(t, e, nodes, 1)
	t.Run("plain/whole cards", perNode(modePlain, wholeCardScenarios))

	reportTopology(t, y, nodes)
	t.Logf("TestTopology took %s", time.Since(started).Round(time.Second))
}

// setShares restarts every node's plugin with --shares=shares, one node after the other.
func setShares(t *testing.T, e *env, nodes []tmNode, shares int) {
	t.Helper()
	for _, n := range nodes {
		e.SetPluginShares(t, n.name, shares)
	}
}

// checkKubeletInventory waits until every node's inventory carries the kubelet field the plugin
// read from the kubelet's configuration file and the synthetic machine: policy, scope, the static
// CPU manager, 2 NUMA nodes of 8 CPUs with CPU 0 reserved, device topology reported.
// The nodes of busy already run pods with exclusive CPUs (static pods): their exclusive counts
// are not checked.
func checkKubeletInventory(t *testing.T, e *env, nodes []tmNode, busy map[string]bool) {
	t.Helper()
	for _, n := range nodes {
		want := annotations.KubeletTopology{
			TopologyManagerPolicy: n.policy, TopologyManagerScope: n.scope,
			CPUManagerPolicy: annotations.CPUManagerPolicyStatic, DeviceTopology: true,
			NUMA: []annotations.NUMACPUs{{ID: 0, CPUs: 8, ReservedCPUs: 1}, {ID: 1, CPUs: 8}},
		}
		stack.Wait(t, runTimeout, "the inventory of "+n.name+" reporting its kubelet", func() (bool, string, error) {
			inv, err := e.Inventory(context.Background(), n.name)
			if err != nil {
				return false, err.Error(), nil //nolint:nilerr // polling: not published yet
			}
			k := inv.Kubelet
			if k == nil {
				return false, "no kubelet field", nil
			}
			got := *k
			got.NUMA = slices.Clone(k.NUMA)
			for i := range got.NUMA {
				got.NUMA[i].Distances = nil
				if busy[n.name] {
					got.NUMA[i].ExclusiveCPUs = 0
				}
			}
			same := got.TopologyManagerPolicy == want.TopologyManagerPolicy && got.TopologyManagerScope == want.TopologyManagerScope &&
				got.CPUManagerPolicy == want.CPUManagerPolicy && got.DeviceTopology == want.DeviceTopology &&
				cmp.Equal(got.NUMA, want.NUMA)
			return same, fmt.Sprintf("kubelet field %+v, want %+v", got, want), nil
		})
	}
}

// reportTopology logs the table of admission refusals, Cardinal against plain kube-scheduler, and
// fails when Cardinal got any pod refused, or when the plain run got none (the scenarios would no
// longer build the situations they name).
func reportTopology(t *testing.T, y *tally, nodes []tmNode) {
	t.Helper()
	type row struct{ cardinal, plain, pending, ignored map[string]int }
	rows := map[string]*row{}
	for _, sc := range scenarioOrder {
		rows[sc] = &row{map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}}
	}
	total := map[string]int{}
	var refusedByCardinal []string
	for mode, results := range y.results {
		for _, r := range results {
			rw, ok := rows[r.scenario]
			if !ok {
				t.Errorf("result of unknown scenario %q", r.scenario)
				continue
			}
			if r.refused() {
				total[mode]++
				if mode == modeCardinal.name {
					rw.cardinal[r.node]++
					refusedByCardinal = append(refusedByCardinal, fmt.Sprintf("%s on %s: %s: %s", r.pod, r.node, r.reason, r.message))
				} else {
					rw.plain[r.node]++
				}
			}
			if mode == modeCardinal.name && r.phase == corev1.PodPending {
				rw.pending[r.node]++
			}
			if mode == modePlain.name && r.ignoredSelector {
				rw.ignored[r.node]++
			}
		}
	}
	perNode := func(m map[string]int) string {
		sum := 0
		var parts []string
		for _, n := range nodes {
			sum += m[n.name]
			parts = append(parts, fmt.Sprint(m[n.name]))
		}
		return fmt.Sprintf("%d (%s)", sum, strings.Join(parts, "/"))
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	var short []string
	for _, n := range nodes {
		short = append(short, strings.TrimPrefix(n.name, "tm-"))
	}
	fmt.Fprintf(tw, "scenario\tCardinal refused\tplain refused\tCardinal Pending with reason\tplain ran on another card than use-gpuuuid\n")
	fmt.Fprintf(tw, "(per node: %s)\t\t\t\t\n", strings.Join(short, "/"))
	for _, sc := range scenarioOrder {
		rw := rows[sc]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sc, perNode(rw.cardinal), perNode(rw.plain), perNode(rw.pending), perNode(rw.ignored))
	}
	fmt.Fprintf(tw, "total\t%d\t%d\t\t\n", total[modeCardinal.name], total[modePlain.name])
	_ = tw.Flush()
	t.Logf("pods the kubelet refused at admission (%s or %s), Cardinal vs plain kube-scheduler:\n%s",
		reasonTopologyAffinity, reasonUnexpectedAdmission, b.String())
	if len(y.results[modeCardinal.name]) == 0 || len(y.results[modePlain.name]) == 0 {
		t.Errorf("a run recorded no pods (Cardinal %d, plain %d)", len(y.results[modeCardinal.name]), len(y.results[modePlain.name]))
	}
	if len(refusedByCardinal) > 0 {
		t.Errorf("the kubelet refused %d pods Cardinal scheduled, want 0:\n%s", len(refusedByCardinal), strings.Join(refusedByCardinal, "\n"))
	}
	if total[modePlain.name] == 0 {
		t.Errorf("plain kube-scheduler got no pod refused: the scenarios no longer build the situations the kubelet refuses")
	}
}
