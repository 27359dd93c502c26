package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// CardHolder is a container holding a device of a card: the device ID it holds and what it
// reserves (MemoryMiB and Cores 0 with Whole: the card alone).
type CardHolder struct {
	Pod       string `json:"pod"`
	Container string `json:"container"`
	Device    string `json:"device"`
	MemoryMiB int64  `json:"memoryMiB"`
	Cores     int    `json:"cores"`
	// Source is the record the holding is read from: assignment (the extender's) or allocation
	// (the device plugin's, for pods the extender did not place).
	Source string `json:"source"`
}

// CardInfo is one row of kubectl cardinal cards: a card or MIG instance of the node, what is
// held on it in all, and who holds it.
type CardInfo struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	Model string `json:"model"`
	// Parent and Profile are set on a MIG instance; MIGMode on a card in MIG mode.
	Parent    string `json:"parent,omitempty"`
	Profile   string `json:"profile,omitempty"`
	MIGMode   string `json:"migMode,omitempty"`
	NUMA      int    `json:"numa"`
	MemoryMiB int64  `json:"memoryMiB"`
	Shares    int    `json:"shares"`
	Healthy   bool   `json:"healthy"`
	// Cordoned is why an operator took the device out of service (kubectl cardinal cordon), with
	// who did; "" when it is in service.
	Cordoned string `json:"cordoned,omitempty"`
	// State is free, shared (some of it held), whole (held alone or every slot taken), held (a MIG
	// instance someone holds), mig (a parent in MIG mode: its instances are listed after it),
	// unhealthy, or cordoned (out of service: nothing new goes there; its holders stay).
	State string `json:"state"`
	// HeldMemoryMiB, HeldCores and HeldSlots are the cache's sums over the holders.
	HeldMemoryMiB int64        `json:"heldMemoryMiB"`
	HeldCores     int          `json:"heldCores"`
	HeldSlots     int          `json:"heldSlots"`
	Holders       []CardHolder `json:"holders"`
}

// Cards prints kubectl cardinal cards NODE: each card and MIG instance of the node and who holds it.
func (o *Options) Cards(ctx context.Context, nodeName string) error {
	if err := o.checkOutput(); err != nil {
		return err
	}
	c, err := o.load(ctx, "")
	if err != nil {
		return err
	}
	node, err := c.node(nodeName)
	if err != nil {
		return err
	}
	raw, ok := node.Annotations[annotations.GPUInventory]
	if !ok {
		return fmt.Errorf("node %q has no %s annotation: Cardinal's device plugin does not run there", nodeName, annotations.GPUInventory)
	}
	st := c.cache.NodeUsage(nodeName)
	if st == nil {
		_, err := annotations.DecodeInventory(raw)
		return fmt.Errorf("node %q: %w", nodeName, err)
	}
	holders := holdersOn(nodeName, c.pods)
	rows := make([]CardInfo, 0, len(st.Cards))
	for i := range st.Cards {
		card := &st.Cards[i]
		r := CardInfo{Index: card.Index, UUID: card.UUID, Model: card.Model, Parent: card.Parent, Profile: card.Profile,
			NUMA: card.NUMA, MemoryMiB: card.MemoryMiB, Shares: card.Shares, Healthy: card.Healthy, Cordoned: card.Cordoned,
			HeldMemoryMiB: card.MemMiB, HeldCores: card.Cores, HeldSlots: card.Held, Holders: holders[card.UUID]}
		if r.Holders == nil {
			r.Holders = []CardHolder{}
		}
		switch {
		case card.InMIGMode():
			r.MIGMode, r.State = card.MIG.Mode, "mig"
		case !card.Healthy:
			r.State = "unhealthy"
		case card.Cordoned != "":
			r.State = "cordoned"
		case card.Instance() && card.Held > 0:
			r.State = "held"
		case card.Whole > 0 || card.FreeSlots() == 0:
			r.State = "whole"
		case card.Held > 0 || card.MemMiB > 0 || card.Cores > 0:
			r.State = "shared"
		default:
			r.State = "free"
		}
		rows = append(rows, r)
	}
	if o.Output == OutputJSON {
		return o.writeJSON(rows)
	}
	w := tabwriter.NewWriter(o.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CARD\tUUID\tMODEL\tNUMA\tMEMORY\tSTATE\tHELD MEM\tHELD CORES\tPOD\tCONTAINER\tDEVICE\tMEM\tCORES")
	for _, r := range rows {
		name := strconv.Itoa(r.Index)
		if r.Profile != "" {
			name = "  " + name + " " + r.Profile
		}
		state := r.State
		switch {
		case r.MIGMode != "":
			state = "mig " + r.MIGMode
		case r.Cordoned != "":
			state = "cordoned: " + r.Cordoned
		}
		head := fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d%%", cell(name), cell(r.UUID), cell(r.Model), r.NUMA, mib(r.MemoryMiB), cell(state),
			mib(r.HeldMemoryMiB), r.HeldCores)
		if len(r.Holders) == 0 {
			fmt.Fprintf(w, "%s\t-\t-\t-\t-\t-\n", head)
			continue
		}
		for _, h := range r.Holders {
			// An assignment without memory and cores is a whole device; the allocation record
			// does not say what a container reserves.
			mem, cores := "whole", "whole"
			if h.Source != "assignment" {
				mem, cores = "?", "?"
			}
			if h.MemoryMiB > 0 || h.Cores > 0 {
				mem, cores = mib(h.MemoryMiB), strconv.Itoa(h.Cores)+"%"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", head, cell(h.Pod), cell(h.Container), cell(h.Device), mem, cores)
		}
	}
	return w.Flush()
}

// holdersOn reads who holds what on the node from the bound, unfinished pods' records, as the
// extender's cache does: the assignment for the pods it placed, the device plugin's allocation
// record for the others. The map's keys are card (or MIG instance) UUIDs.
func holdersOn(node string, pods []corev1.Pod) map[string][]CardHolder {
	out := map[string][]CardHolder{}
	for i := range pods {
		pod := &pods[i]
		if pod.Spec.NodeName != node || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		key := pod.Namespace + "/" + pod.Name
		done := map[string]bool{}
		if raw, ok := pod.Annotations[annotations.GPUAssignment]; ok {
			if a, err := annotations.DecodeAssignment(raw); err == nil && a.Node == node {
				for _, ca := range a.Containers {
					done[ca.Name] = true
					for _, d := range ca.Devices {
						out[d.UUID] = append(out[d.UUID], CardHolder{Pod: key, Container: ca.Name, Device: d.ID,
							MemoryMiB: d.MemoryMiB, Cores: d.Cores, Source: "assignment"})
					}
				}
			}
		}
		if raw, ok := pod.Annotations[annotations.GPUAllocated]; ok {
			if a, err := annotations.DecodeAllocation(raw); err == nil && (a.Node == "" || a.Node == node) {
				for _, ca := range a.Containers {
					if done[ca.Name] {
						continue
					}
					for _, id := range ca.IDs {
						uuid, _, err := annotations.ParseDeviceID(id)
						if err != nil {
							continue
						}
						out[uuid] = append(out[uuid], CardHolder{Pod: key, Container: ca.Name, Device: id, Source: "allocation"})
					}
				}
			}
		}
	}
	for _, hs := range out {
		slices.SortFunc(hs, func(a, b CardHolder) int {
			if c := strings.Compare(a.Pod, b.Pod); c != 0 {
				return c
			}
			return strings.Compare(a.Container, b.Container)
		})
	}
	return out
}
