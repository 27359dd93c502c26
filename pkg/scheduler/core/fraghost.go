package core

import "math"

// hostCapacity is the GPU capacity, in cards, that pods of class t can still take on a node whose
// CPU and memory are h less extra. For a whole-card class: as many pods as the free CPU and memory
// hold, fractions included, times the class's cards; +Inf when neither resource limits the class
// (unknown, or not asked for); 0 when not one pod fits. A shared class keeps FGD's rule alone: +Inf
// when one pod fits, else 0. fragState.hostCaps keeps it per counted class for a node and a pod.
//
// It makes F(m) count the free cards that m could use card by card but would never reach, because
// the node's CPU or memory runs out first. FGD's rule ("a task the node lacks CPU or memory for finds
// all its free GPUs fragmented") is the case of less than one pod; a node with 5 free cards and CPU
// for 3 more one-card pods of m leaves 2 cards to F(m), where FGD's rule counts none, so a CPU-hungry
// one-card pod goes where CPU is plentiful for the cards left, not where it strands them.
//
// Fractions: a class is a bucket of requests (HostCPUBucket, HostMemBucket) standing for a spread of
// real ones, so CPU for 2.5 pods of m is worth 2.5 cards, not 2; rounding down made every node whose
// CPU is not a multiple of the bucket look fragmented (multigpu50, seed 42, core scoring: 94.66 %
// GPU allocated at 130 % arrival rounded down, 95.00 % with fractions; default 95.10 and 95.50 %).
// Shared classes: a pod takes a share of one card, so what its host leaves out of reach is a share
// of a card at most per pod short, and counting it moved the default and gpushare100 traces down
// (seeds 43–44, core: 95.43 and 86.93 % against 95.63 and 87.15 % with whole-card classes only).
func (t *fragClass) hostCapacity(h *HostState, extra HostRequest) float64 {
	if !t.whole {
		if h.Fits(t.cpu, t.mem, extra) {
			return math.Inf(1)
		}
		return 0
	}
	pods := math.Inf(1)
	if h.AllocCPUMilli > 0 && t.cpu > 0 {
		pods = float64(h.AllocCPUMilli-h.UsedCPUMilli-extra.CPUMilli) / float64(t.cpu)
	}
	if h.AllocMemMiB > 0 && t.mem > 0 {
		pods = min(pods, float64(h.AllocMemMiB-h.UsedMemMiB-extra.MemMiB)/float64(t.mem))
	}
	if pods < 1 {
		return 0
	}
	return pods * float64(t.cards)
}

// fragOf is F(t) of a node from the sums over its cards (fragState.sums: the cards that host t,
// count, the free capacity of those that do not, frag, and all free capacity, total) and
// hostCapacity: all free capacity when t cannot run on the node, otherwise what t cannot reach,
// card by card or for want of CPU and memory.
func (t *fragClass) fragOf(count int, frag, total, hostCap float64) float64 {
	if count < t.cards || hostCap <= 0 {
		return total
	}
	return max(frag, total-hostCap)
}
