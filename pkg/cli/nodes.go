package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/scheduler/core"
)

// NodeSummary is one row of kubectl cardinal nodes: a node with a Cardinal inventory and what is
// free on it, as the extender's cache counts it from the inventory and the pods' records.
type NodeSummary struct {
	Name string `json:"name"`
	// Models is the cards' summary ("2x NVIDIA A40, 1x NVIDIA A100-SXM4-80GB in MIG mode").
	Models string `json:"models"`
	// Cards counts the cards (MIG parents included, instances not); Healthy and Unhealthy split
	// the cards that serve whole or shared requests (MIG parents are in neither).
	Cards     int `json:"cards"`
	Healthy   int `json:"healthy"`
	Unhealthy int `json:"unhealthy"`
	// Cordoned counts the healthy cards an operator took out of service (kubectl cardinal cordon):
	// they are in Healthy, and in no free count.
	Cordoned int `json:"cordoned"`
	// FreeWhole counts healthy cards nothing is held on. FreeSlots and Slots count the device IDs
	// of healthy cards (a shared card offers its shares), free and in all; FreeMemoryMiB and
	// MemoryMiB their memory.
	FreeWhole     int   `json:"freeWhole"`
	FreeSlots     int   `json:"freeSlots"`
	Slots         int   `json:"slots"`
	FreeMemoryMiB int64 `json:"freeMemoryMiB"`
	MemoryMiB     int64 `json:"memoryMiB"`
	// NUMA lists the NUMA nodes the cards are on.
	NUMA []int `json:"numa"`
	// MIGFree counts healthy MIG instances nothing holds; MIGTotal all instances.
	MIGFree  int `json:"migFree"`
	MIGTotal int `json:"migTotal"`
	// TopologyPolicy is the kubelet's TopologyManager policy from the inventory ("none" when the
	// inventory reports no kubelet).
	TopologyPolicy string `json:"topologyPolicy"`
	// Sharing is the node's sharing mode ("none" when the inventory has none), with ", not ready"
	// while its enforcement does not work; Memory and Compute what holds shared containers' memory
	// and compute there, as the plugin says ("" from a plugin older than those fields).
	Sharing string `json:"sharing"`
	Memory  string `json:"memory,omitempty"`
	Compute string `json:"compute,omitempty"`
	// Error says why the node's inventory cannot be read (then the counts are zero).
	Error string `json:"error,omitempty"`
}

// Nodes prints kubectl cardinal nodes: every node with a cardinal.io/gpu-inventory annotation.
func (o *Options) Nodes(ctx context.Context) error {
	if err := o.checkOutput(); err != nil {
		return err
	}
	c, err := o.load(ctx, "")
	if err != nil {
		return err
	}
	rows := []NodeSummary{}
	for i := range c.nodes {
		node := &c.nodes[i]
		raw, ok := node.Annotations[annotations.GPUInventory]
		if !ok {
			continue
		}
		st := c.cache.NodeUsage(node.Name)
		if st == nil {
			row := NodeSummary{Name: node.Name, Error: "inventory unreadable"}
			if _, err := annotations.DecodeInventory(raw); err != nil {
				row.Error = err.Error()
			}
			rows = append(rows, row)
			continue
		}
		rows = append(rows, summarize(st))
	}
	if o.Output == OutputJSON {
		return o.writeJSON(rows)
	}
	if len(rows) == 0 {
		_, err := fmt.Fprintf(o.Out, "No node has a %s annotation: is Cardinal's device plugin running?\n", annotations.GPUInventory)
		return err
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NODE\tMODELS\tCARDS\tFREE\tSLOTS FREE\tMEMORY FREE\tHEALTHY\tCORDONED\tNUMA\tMIG FREE\tTOPOLOGY\tSHARING")
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(w, "%s\t<bad inventory: %s>\t-\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", cell(r.Name), cell(r.Error))
			continue
		}
		mig := "-"
		if r.MIGTotal > 0 {
			mig = fmt.Sprintf("%d/%d", r.MIGFree, r.MIGTotal)
		}
		sharing := r.Sharing
		if r.Memory != "" {
			sharing += " (memory " + r.Memory + ", compute " + r.Compute + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d/%d\t%s/%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\n", cell(r.Name), cell(r.Models), r.Cards, r.FreeWhole,
			r.FreeSlots, r.Slots, mib(r.FreeMemoryMiB), mib(r.MemoryMiB), r.Healthy, r.Healthy+r.Unhealthy, r.Cordoned,
			ints(r.NUMA), mig, cell(r.TopologyPolicy), cell(sharing))
	}
	return w.Flush()
}

// summarize counts a node state's cards.
func summarize(st *core.NodeState) NodeSummary {
	r := NodeSummary{Name: st.Name, Models: st.Models, NUMA: []int{}, TopologyPolicy: annotations.TopologyPolicyNone, Sharing: st.Sharing.ModeOrNone()}
	if sh := st.Sharing; sh != nil {
		if !sh.Ready {
			r.Sharing += ", not ready"
		}
		if sh.EnforcementV >= 1 {
			r.Memory, r.Compute = sh.Memory, sh.Compute
		}
	}
	if st.Kubelet != nil && st.Kubelet.TopologyManagerPolicy != "" {
		r.TopologyPolicy = st.Kubelet.TopologyManagerPolicy
	}
	for i := range st.Cards {
		c := &st.Cards[i]
		if c.Instance() {
			r.MIGTotal++
			if c.Healthy && c.Held == 0 && c.Cordoned == "" {
				r.MIGFree++
			}
			continue
		}
		r.Cards++
		if !slices.Contains(r.NUMA, c.NUMA) {
			r.NUMA = append(r.NUMA, c.NUMA)
		}
		if c.InMIGMode() {
			continue
		}
		if !c.Healthy {
			r.Unhealthy++
			continue
		}
		r.Healthy++
		r.Slots += c.Slots()
		r.MemoryMiB += c.MemoryMiB
		if c.Cordoned != "" {
			r.Cordoned++
			continue // out of service: nothing of it is free
		}
		if c.Held == 0 && c.MemMiB == 0 && c.Cores == 0 {
			r.FreeWhole++
		}
		if c.Whole == 0 {
			r.FreeSlots += c.FreeSlots()
			r.FreeMemoryMiB += c.FreeMemMiB()
		}
	}
	slices.Sort(r.NUMA)
	return r
}

// mib prints a memory size: in whole GiB when it is a whole number of them, in GiB to one decimal
// from 1 GiB on, else in MiB.
func mib(v int64) string {
	switch {
	case v%1024 == 0:
		return strconv.FormatInt(v/1024, 10) + "Gi"
	case v >= 1024:
		return strconv.FormatFloat(float64(v)/1024, 'f', 1, 64) + "Gi"
	}
	return strconv.FormatInt(v, 10) + "Mi"
}

// ints prints a list as 0,1 ("-" when empty).
func ints(v []int) string {
	if len(v) == 0 {
		return "-"
	}
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
