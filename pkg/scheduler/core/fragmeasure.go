package core

// Read-only access to the frag-aware measure for reports (the extender's fleet metrics): the same
// computation the policy scores with, over a node as it is.

// Fragmentation measures node n as the frag-aware policy does under mix m: fragmented is F(M), the
// node's free GPU capacity (in cards) that the mix's requests cannot use, and free is the node's
// free capacity (the sum of its cards' FreeCapacity). Without a mix (nil or empty) nothing counts
// as fragmented. It allocates a working state per call; the policy's scores do not call it.
func (m *TaskMix) Fragmentation(n *NodeState) (fragmented, free float64) {
	for i := range n.Cards {
		free += n.Cards[i].FreeCapacity()
	}
	if m == nil || m.Total <= 0 {
		return 0, free
	}
	var s fragState
	s.prepare(n, m, 0)
	s.listNode()
	return s.expected(&n.Host, HostRequest{}), free
}

// FreeCapacity is card c's free capacity in cards as the frag-aware measure counts it: 1 − its
// Utilization, 0 when it is held whole, unhealthy or a MIG instance.
func (c *Card) FreeCapacity() float64 { return newView(c, c.Usage).free }
