package topology

import (
	"fmt"
	"slices"
	"testing"
)

// FuzzAdmit builds a node and a pod from the input and checks what must hold whatever the policy:
// every container gets exactly its count of distinct, healthy, free devices that its Allocation
// accepts; long-running containers share none; exclusive CPUs add up; restricted and
// single-numa-node admit only preferred hints; at container scope single-numa-node keeps a
// container's devices on its NUMA node; a container takes devices of its own resource only (at
// pod scope, for pods of one resource).
func FuzzAdmit(f *testing.F) {
	f.Add([]byte{2, 1, 0, 1, 16, 2, 4, 16, 0, 0, 4, 1, 0, 4, 0, 1, 2, 6, 0})
	f.Add([]byte{3, 2, 1, 1, 8, 0, 2, 8, 1, 1, 8, 0, 0, 2, 1, 1, 2, 1, 1, 3, 4, 2, 5, 2, 1})
	f.Add([]byte{1, 3, 0, 0, 4, 0, 0, 4, 2, 0, 1, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		next := func() int {
			if len(in) == 0 {
				return 0
			}
			b := int(in[0])
			in = in[1:]
			return b
		}
		policies := []Policy{PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode}
		n := &Node{Policy: policies[next()%4], Scope: []Scope{ScopeContainer, ScopePod}[next()%2],
			CPUPolicy: []CPUPolicy{CPUPolicyNone, CPUPolicyStatic}[next()%2]}
		var devs []Device
		for id := range 1 + next()%4 {
			cpus := next() % 17
			reserved := min(cpus, next()%3)
			n.NUMA = append(n.NUMA, numa(id, cpus, reserved, min(cpus-reserved, next()%17)))
			flags := next()
			count, res := next()%5, next()
			for k := range count {
				devs = append(devs, Device{ID: fmt.Sprintf("n%d-%d", id, k), NUMA: id, Resource: fuzzResources[res>>k&1],
					Healthy: flags>>(2*k)&1 == 0, Held: flags>>(2*k+1)&1 == 1})
			}
		}
		req := &Request{Guaranteed: next()%2 == 0}
		for i := range 1 + next()%4 {
			kind := next() % 3
			d := next()
			req.Containers = append(req.Containers, Container{Name: fmt.Sprint("c", i), Init: kind > 0, Restartable: kind == 2,
				Devices: d % 4, ListsDevices: d&4 != 0, Resource: fuzzResources[d>>3&1], CPUs: next() % 9})
		}
		if n.Scope == ScopePod && !req.OneResource() {
			return // not modelled: callers refuse such pods
		}
		res, ref := Admit(n, devs, req)
		if n.Policy == PolicyNone {
			if ref != nil || !res.Unconstrained {
				t.Fatalf("policy none: %+v %v", res, ref)
			}
			return
		}
		if ref != nil {
			if ref.Error() == "" {
				t.Fatal("empty refusal")
			}
			return
		}
		if len(res.Containers) != len(req.Containers) {
			t.Fatalf("%d results for %d containers", len(res.Containers), len(req.Containers))
		}
		var running []string
		for i, c := range req.Containers {
			r := &res.Containers[i]
			if n.Policy != PolicyBestEffort && !r.Hint.Preferred {
				t.Fatalf("%s admitted %s with a non-preferred hint %+v", n.Policy, c.Name, r.Hint)
			}
			taken := r.Devices.Taken
			if len(taken) != c.Devices || !r.Devices.Accepts(taken) {
				t.Fatalf("%s: took %v of %d (%+v)", c.Name, taken, c.Devices, r.Devices)
			}
			for _, id := range taken {
				k := slices.IndexFunc(devs, func(d Device) bool { return d.ID == id })
				if k < 0 || !devs[k].Healthy || devs[k].Held || devs[k].Resource != c.Resource {
					t.Fatalf("%s: took %s, not a free healthy device of its resource %q", c.Name, id, c.Resource)
				}
				if n.Policy == PolicySingleNUMANode && n.Scope != ScopePod && r.Hint.Affinity != 0 && !r.Hint.Affinity.Has(devs[k].NUMA) {
					t.Fatalf("%s: took %s outside its NUMA node %s", c.Name, id, r.Hint.Affinity)
				}
				if !c.Init || c.Restartable {
					if slices.Contains(running, id) {
						t.Fatalf("%s: %s is held by another running container", c.Name, id)
					}
					running = append(running, id)
				}
			}
			want := 0
			if n.CPUPolicy == CPUPolicyStatic && req.Guaranteed {
				want = c.CPUs
			}
			sum := 0
			for _, k := range r.CPUs {
				sum += k
			}
			if sum != want {
				t.Fatalf("%s: %d exclusive CPUs, want %d", c.Name, sum, want)
			}
		}
	})
}

// fuzzResources are the device resources FuzzAdmit draws from: Cardinal's GPU resource and one MIG
// profile.
var fuzzResources = [2]string{"", "1g.10gb"}
