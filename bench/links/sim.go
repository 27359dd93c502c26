package main

import (
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// A topology is how a node's 8 cards are linked: cards 0-3 on NUMA node 0, 4-7 on NUMA node 1;
// link(a, b) for a < b.
type topology struct {
	name string
	link func(a, b int) annotations.Link
}

const cardsPerNode = 8

// pcieOf is the PCIe common ancestor of two cards on every simulated node: cards 2k and 2k+1 share
// a PCIe switch, a socket's two switches its host bridge, and cards of different sockets meet at
// the system level.
func pcieOf(a, b int) string {
	switch {
	case a/2 == b/2:
		return annotations.PCIeSwitch
	case a/4 == b/4:
		return annotations.PCIeHostBridge
	}
	return annotations.PCIeSystem
}

// The simulated topologies of issue 24.
var topologies = []topology{
	{name: "nvswitch", link: func(a, b int) annotations.Link {
		return annotations.Link{NVLinks: 12, NVSwitch: true, PCIe: pcieOf(a, b)}
	}},
	{name: "nvlink-pairs", link: func(a, b int) annotations.Link {
		l := annotations.Link{PCIe: pcieOf(a, b)}
		if a/2 == b/2 {
			l.NVLinks = 4
		}
		return l
	}},
	{name: "pcie-switches", link: func(a, b int) annotations.Link { return annotations.Link{PCIe: pcieOf(a, b)} }},
}

// inventory is a node of topology t: with its links, or without (links false).
func inventory(node string, t topology, links bool) annotations.Inventory {
	inv := annotations.Inventory{V: annotations.Version}
	for i := range cardsPerNode {
		inv.GPUs = append(inv.GPUs, annotations.GPU{UUID: fmt.Sprintf("GPU-%s-%d", node, i), Index: i, Model: "NVIDIA A100-SXM4-80GB",
			MemoryMiB: 81920, NUMA: i / 4, Healthy: true, Shares: 1})
		for j := i + 1; links && j < cardsPerNode; j++ {
			l := t.link(i, j)
			l.A, l.B = i, j
			inv.Links = append(inv.Links, l)
		}
	}
	return inv
}

// A policy places pods on the cluster.
type policy int

const (
	// cardinal: the node and the cards chosen with links (the extender's decision core on nodes
	// that publish them; binpack node and card policies unless config.policy says otherwise).
	cardinal policy = iota
	// binpack: the same core and policies on nodes that publish no links (card binpack with the
	// default policy).
	binpack
	// kubeletTime: the node chosen without links (as binpack), then the cards picked on it at kubelet
	// time as NVIDIA's device plugin does: a multi-card container gets the best-linked set of the
	// node's free cards, a single card the first free one.
	kubeletTime
)

var policies = []policy{cardinal, binpack, kubeletTime}

// name is the policy's name in the table, the node and card policy being pol.
func (p policy) name(pol annotations.Policy) string {
	if pol == "" {
		pol = annotations.PolicyBinpack
	}
	return [...]string{"cardinal (links)", "card " + string(pol) + " without links", "kubelet-time picking"}[p]
}

// config is one run: the cluster (nodes per topology, in order), the workload and its seed.
type config struct {
	cluster []topology
	pods    int
	seed    uint64
	// duration is the mean lifetime of a pod, in arrivals.
	duration int
	// policy is the node and card policy of every placement ("": binpack).
	policy annotations.Policy
}

// result counts what a run placed.
type result struct {
	pods, placed int
	// multi is the multi-card pods placed; nvlink those whose cards are pairwise NVLink-connected,
	// switch those whose worst pair is at most one PCIe switch apart (NVLink included).
	multi, nvlink, sameSwitch int
	// bySize are the multi-card pods placed and those given all-NVLink cards, by card count.
	bySize map[int][2]int
}

func (r *result) add(o result) {
	r.pods += o.pods
	r.placed += o.placed
	r.multi += o.multi
	r.nvlink += o.nvlink
	r.sameSwitch += o.sameSwitch
	if r.bySize == nil {
		r.bySize = map[int][2]int{}
	}
	for k, v := range o.bySize {
		r.bySize[k] = [2]int{r.bySize[k][0] + v[0], r.bySize[k][1] + v[1]}
	}
}

// simNode is a node in both forms: its state with links and without, kept holding the same cards.
type simNode struct {
	name          string
	topo          topology
	linked, plain *core.NodeState
}

type running struct {
	end   int
	node  int
	holds []core.Holding
}

// sizes are the pods' card counts and their weights: half single-card pods, then 2, 4 and 8 cards.
var sizes = []struct{ cards, weight int }{{1, 50}, {2, 25}, {4, 15}, {8, 10}}

// run replays the workload under policy p: pods arrive one at a time, each living a random time
// (uniform in 1..2×duration arrivals); a pod that fits nowhere when it arrives is dropped.
func run(c config, p policy) (result, error) {
	pol := c.policy
	if pol == "" {
		pol = annotations.PolicyBinpack
	}
	d, err := core.New(core.Options{NodePolicy: pol, GPUPolicy: pol})
	if err != nil {
		return result{}, err
	}
	pods := map[int]*core.Pod{}
	for _, s := range sizes {
		if pods[s.cards], err = d.Prepare(annotations.PodRequest{Containers: []annotations.ContainerRequest{{Name: "main", Count: s.cards}}},
			annotations.Selector{}); err != nil {
			return result{}, err
		}
	}
	nodes := make([]simNode, len(c.cluster))
	for i, t := range c.cluster {
		name := fmt.Sprintf("node-%03d", i)
		nodes[i] = simNode{name: name, topo: t, linked: core.NewNodeState(name, inventory(name, t, true)),
			plain: core.NewNodeState(name, inventory(name, t, false))}
	}
	rng := rand.New(rand.NewPCG(c.seed, 24))
	total := 0
	for _, s := range sizes {
		total += s.weight
	}
	res := result{bySize: map[int][2]int{}}
	var live []running
	var s core.Scratch
	// The mix of requests seen so far, as the extender's cache counts it (frag-aware reads it).
	mix := &core.TaskMix{}
	for t := range c.pods {
		live = slices.DeleteFunc(live, func(r running) bool {
			if r.end > t {
				return false
			}
			for _, h := range r.holds {
				nodes[r.node].linked.Unhold(h)
				nodes[r.node].plain.Unhold(h)
			}
			return true
		})
		w, cards := rng.IntN(total), 0
		for _, s := range sizes {
			if w < s.weight {
				cards = s.cards
				break
			}
			w -= s.weight
		}
		life := 1 + rng.IntN(2*c.duration)
		res.pods++
		pod := pods[cards]
		mix.AddPod(&pod.Request, &pod.Selector)
		// Choose the node: by the states the policy sees.
		best, bestScore := -1, core.Candidate{}
		for i := range nodes {
			state := nodes[i].plain
			if p == cardinal {
				state = nodes[i].linked
			}
			plan, r := pod.FitWith(state, mix, &s)
			if r != nil {
				continue
			}
			cand := core.Candidate{Name: nodes[i].name, Score: pod.ScoreWith(state, plan, mix, &s)}
			if best < 0 || cand.Better(bestScore) {
				best, bestScore = i, cand
			}
		}
		if best < 0 {
			continue
		}
		n := &nodes[best]
		// Pick the cards on it.
		state := n.plain
		if p == cardinal || (p == kubeletTime && cards > 1) {
			state = n.linked
		}
		plan, r := pod.FitWith(state, mix, &s)
		if r != nil {
			return result{}, fmt.Errorf("pod %d fits node %s by score but not when placed: %s", t, n.name, r)
		}
		holds := state.Holdings(plan)
		set := make([]int, 0, len(holds))
		for _, h := range holds {
			n.linked.Hold(h)
			n.plain.Hold(h)
			i, _ := n.linked.CardIndex(h.UUID)
			set = append(set, i)
		}
		live = append(live, running{end: t + life, node: best, holds: holds})
		res.placed++
		if cards > 1 {
			res.multi++
			nv, sw := linkedSet(n.topo, set)
			got := res.bySize[cards]
			got[0]++
			if nv {
				res.nvlink++
				got[1]++
			}
			res.bySize[cards] = got
			if sw {
				res.sameSwitch++
			}
		}
	}
	return res, nil
}

// linkedSet reports whether the cards of set (positions) on a node of topology t are pairwise
// NVLink-connected, and whether each pair is NVLink-connected or under one PCIe switch.
func linkedSet(t topology, set []int) (nvlink, sameSwitch bool) {
	nvlink, sameSwitch = true, true
	for x := range set {
		for y := x + 1; y < len(set); y++ {
			a, b := min(set[x], set[y]), max(set[x], set[y])
			l := t.link(a, b)
			if !l.NVLink() {
				nvlink = false
				if l.PCIe != annotations.PCIeBoard && l.PCIe != annotations.PCIeSwitch {
					sameSwitch = false
				}
			}
		}
	}
	return nvlink, sameSwitch
}

// cluster is n nodes of each topology named, in order.
func cluster(n int, names ...string) []topology {
	var out []topology
	for _, name := range names {
		for _, t := range topologies {
			if t.name == name {
				for range n {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// options are the table's sizes.
type options struct {
	nodes, pods, seeds, duration int
	policy                       annotations.Policy
}

// table runs every cluster under every policy over the seeds 1..o.seeds and writes the Markdown
// table: per cluster and policy the pods placed and, of the multi-card pods placed, the share
// given an all-NVLink set and the share whose cards are at most one PCIe switch apart.
func table(w io.Writer, o options) error {
	clusters := []struct {
		name  string
		nodes []topology
	}{
		{"8-card NVSwitch", cluster(o.nodes, "nvswitch")},
		{"8 PCIe, NVLink pairs", cluster(o.nodes, "nvlink-pairs")},
		{"8 PCIe, 2 switches per socket", cluster(o.nodes, "pcie-switches")},
		{"mixed (a third of each)", cluster(max(o.nodes/3, 1), "nvswitch", "nvlink-pairs", "pcie-switches")},
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| cluster | policy | pods placed | multi-card placed | all-NVLink share | 2 cards | 4 cards | 8 cards | within one PCIe switch or NVLink |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|\n")
	for _, cl := range clusters {
		for _, p := range policies {
			var sum result
			for seed := 1; seed <= o.seeds; seed++ {
				r, err := run(config{cluster: cl.nodes, pods: o.pods, seed: uint64(seed), duration: o.duration, policy: o.policy}, p)
				if err != nil {
					return fmt.Errorf("%s, %s, seed %d: %w", cl.name, p.name(o.policy), seed, err)
				}
				sum.add(r)
			}
			fmt.Fprintf(&b, "| %s (%d nodes) | %s | %d of %d (%.1f %%) | %d | %.1f %% |", cl.name, len(cl.nodes), p.name(o.policy),
				sum.placed, sum.pods, percent(sum.placed, sum.pods), sum.multi, percent(sum.nvlink, sum.multi))
			for _, k := range []int{2, 4, 8} {
				fmt.Fprintf(&b, " %.1f %% |", percent(sum.bySize[k][1], sum.bySize[k][0]))
			}
			fmt.Fprintf(&b, " %.1f %% |\n", percent(sum.sameSwitch, sum.multi))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func percent(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}
