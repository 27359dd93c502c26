package deviceplugin

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/status"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// wantRefusal fails t unless err is a refusal with reason r whose message contains every part.
func wantRefusal(t *testing.T, err error, r Reason, parts ...string) {
	t.Helper()
	st, _ := status.FromError(err)
	if err == nil || !strings.HasPrefix(st.Message(), "cardinal: "+string(r)+":") {
		t.Fatalf("err = %v, want %s", err, r)
	}
	for _, s := range parts {
		if !strings.Contains(st.Message(), s) {
			t.Errorf("message %q lacks %q", st.Message(), s)
		}
	}
}

func TestUnusableAssignmentIsNeverServedNorTakenForOwner(t *testing.T) {
	h100 := func(i int) string {
		if i < 2 {
			return "NVIDIA H100 80GB HBM3"
		}
		return "NVIDIA A100-SXM4-80GB"
	}
	for _, bad := range []struct{ name, raw string }{
		{"malformed", `{"v":1,"node":`},
		{"another node", `{"v":1,"node":"node-b","containers":[{"name":"main","devices":[{"uuid":"GPU-00","id":"GPU-00"}]}]}`},
	} {
		t.Run(bad.name, func(t *testing.T) {
			// Just after a restart: "bad" (an H100-only pod whose assignment cannot be used) and "good"
			// (assigned GPU-01), bound in the same second; the kubelet hands an unassigned A100.
			// This used to index an empty candidate list and panic.
			p := testPluginListing(t, testCards(4, h100), 1)
			b := newPod("bad", ctr{name: "main", count: 1}).rawAssignment(bad.raw).annotate(annotations.UseGPUType, "H100")
			p.UpsertPod(b.obj(t))
			p.UpsertPod(newPod("good", ctr{name: "main", ids: []string{uuidOf(1)}}).createdWith(b).obj(t))
			// Only "good" may have it: served as good's; if the kubelet gave it to "bad", bad never starts.
			resp, err := allocateIDs(p, uuidOf(2))
			if err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, startAs(p, b, "main", []string{uuidOf(2)}, resp), ReasonUnusable, "pod default/bad")

			// With the order certain ("bad" created and bound first), the same IDs used to be served
			// to "bad" as if Cardinal had not scheduled it: an A100 for an H100-only pod.
			q := testPlugin(t, testCards(4, h100), 1)
			q.UpsertPod(newPod("bad", ctr{name: "main", count: 1}).rawAssignment(bad.raw).annotate(annotations.UseGPUType, "H100").obj(t))
			q.UpsertPod(newPod("good", ctr{name: "main", ids: []string{uuidOf(1)}}).obj(t))
			_, err = allocateIDs(q, uuidOf(2))
			wantRefusal(t, err, ReasonUnusable, `pod default/bad container "main"`)
			// The kubelet rejects "bad" for good: "good" is admitted next and served.
			if _, err := allocateIDs(q, uuidOf(1)); err != nil {
				t.Errorf("good after bad was refused: %v", err)
			}
		})
	}
}

func TestSiblingsKeepTheirOwnLimits(t *testing.T) {
	// An init container holds slots of cards 0 and 1 and hands them on to app1 (50000 MiB, 60 %,
	// planned on card 0) and app2 (5000 MiB, 10 %, planned on card 1). The kubelet picks reused
	// devices in map order: app1 gets card 1's slot, app2 card 0's. Each keeps its own limits.
	p := testPlugin(t, testCards(4, nil), 4)
	s0, s1 := annotations.SlotID(uuidOf(0), 0), annotations.SlotID(uuidOf(1), 0)
	p.UpsertPod(newPod("pod",
		ctr{name: "init", init: true, ids: []string{s0, s1}, memMiB: 50000, cores: 60},
		ctr{name: "app1", ids: []string{s0}, memMiB: 50000, cores: 60},
		ctr{name: "app2", ids: []string{s1}, memMiB: 5000, cores: 10}).obj(t))
	if _, err := allocateIDs(p, s0, s1); err != nil {
		t.Fatal(err)
	}
	limits := func(mem, cores string) map[string]string {
		return map[string]string{EnvCUDADeviceOrder: "PCI_BUS_ID", EnvMemoryLimitPrefix + "0": mem + "m", EnvMPSMemoryLimit: "0=" + mem + "M",
			EnvSMLimit: cores, EnvMPSThreadPercentage: cores}
	}
	for _, step := range []struct {
		id, ctr    string
		mem, cores string
	}{{s1, "app1", "50000", "60"}, {s0, "app2", "5000", "10"}} {
		resp, err := allocateIDs(p, step.id)
		if err != nil {
			t.Fatalf("%s: %v", step.ctr, err)
		}
		env := resp.ContainerResponses[0].Envs
		delete(env, EnvVisibleDevices)
		if diff := cmp.Diff(limits(step.mem, step.cores), env); diff != "" {
			t.Errorf("%s given %s: env (-want +got):\n%s", step.ctr, step.id, diff)
		}
		if got := recordOf(t, p, "pod")[step.ctr].IDs; !cmp.Equal(got, []string{step.id}) {
			t.Errorf("%s recorded %v, want %s", step.ctr, got, step.id)
		}
	}
}

// A pod that names Cardinal's scheduler but was bound without an assignment (someone else posted
// its Binding) is never served, and never served as a pod Cardinal did not schedule: the same pod
// bound by another scheduler's name is.
func TestPodBoundAroundCardinalIsNeverServed(t *testing.T) {
	p := testPlugin(t, testCards(2, nil), 1)
	p.UpsertPod(newPod("forged", ctr{name: "main", count: 1}).boundByOther().obj(t))
	_, err := allocateOne(p, []string{uuidOf(0)})
	wantRefusal(t, err, ReasonUnusable, "default/forged", `names Cardinal's scheduler "cardinal-scheduler" but carries no cardinal.io/gpu-assignment`)

	// The same holds for Cardinal's exact profile (issue 39: two profiles).
	e := testPlugin(t, testCards(2, nil), 1)
	exact := newPod("forged-exact", ctr{name: "main", count: 1}).boundByOther()
	exact.pod.Spec.SchedulerName = testExactScheduler
	e.UpsertPod(exact.obj(t))
	_, err = allocateOne(e, []string{uuidOf(0)})
	wantRefusal(t, err, ReasonUnusable, "default/forged-exact", `names Cardinal's scheduler "cardinal-scheduler-exact" but carries no cardinal.io/gpu-assignment`)

	q := testPlugin(t, testCards(2, nil), 1)
	q.UpsertPod(newPod("other", ctr{name: "main", count: 1}).unmanaged().obj(t))
	if _, err := allocateOne(q, []string{uuidOf(0)}); err != nil {
		t.Fatalf("a pod of another scheduler: %v", err)
	}
}
