package deviceplugin

// Admission order: which pod the kubelet admits first.
//
// The kubelet's rule (k8s.io/kubernetes v1.34, pkg/kubelet): its API server source is a reflector
// over the pods bound to the node whose store (cache.UndeltaStore) sends the whole set on every
// watch event and on every (re)list (config/apiserver.go); the pod config merges each set with what
// it knew and hands the pods new to it to the sync loop as one ADD (config/config.go), and
// HandlePodAdditions (kubelet.go) sorts each such batch by creation timestamp (sort.Sort, not
// stable: equal timestamps come out in any order) and admits its pods one at a time, allocating
// each pod's devices during admission, containers in order (init containers first). Batches are
// handled in arrival order. A batch is usually one watch event (one newly bound pod), but the
// kubelet's first list after it starts, and every relist after its watch broke, is one batch of
// every pod bound meanwhile. The plugin cannot see the kubelet's batches, so:
//
//   - A is certainly admitted before B only when A cannot reach the kubelet later than B (A was
//     bound first: boundBefore) and A sorts first should they share a batch (A was created in an
//     earlier second: timestamps have whole seconds). Either alone is not enough: a pod bound first
//     but created later is admitted second when a restart or relist merges the two; a pod created
//     first but bound later is admitted second when the kubelet saw the other alone.
//   - Pods created in the same second are never ordered, whatever their bind order.
//
// When the order is not certain, Allocate serves only answers every candidate would get (owner.go).

// boundBefore reports whether a was certainly bound to the node before b, so that no list or watch
// of the kubelet can show it b without a: the plugin's watch delivered a's binding first (both after
// its initial list), or a was in the initial list and b came later, or the API server stamped a's
// binding (PodScheduled) in an earlier second. The watch's order is the API server's; a relist of
// the plugin's own informer after a broken watch can deliver pods bound meanwhile in name order,
// which the PodScheduled check does not catch for pods bound in the same second (a rare residue).
func boundBefore(a, b *podEntry) bool {
	switch {
	case a.bound.Before(b.bound):
		return true
	case b.bound.Before(a.bound):
		return false
	case a.listed && b.listed:
		return false // the initial list is in name order: same second, no order
	case a.listed != b.listed:
		return a.listed
	}
	return a.seq < b.seq
}

// certainlyBefore reports whether the kubelet certainly admits a before b (see above).
func certainlyBefore(a, b *podEntry) bool {
	return a.created.Before(b.created) && boundBefore(a, b)
}

// admittedBefore is the plugin's best guess of the kubelet's order, a total order used where
// certainty is not needed (the order holders are listed in, the guess among interchangeable
// candidates): the order the plugin saw the pods bound, which is the kubelet's while each binding
// reaches it as a watch event of its own (the common case); pods the plugin first saw together in
// its initial list by bind time (to the second), then as listed.
func admittedBefore(a, b *podEntry) bool {
	if a.listed && b.listed && !a.bound.Equal(b.bound) {
		return a.bound.Before(b.bound)
	}
	return a.seq < b.seq
}
