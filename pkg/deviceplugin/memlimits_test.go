package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/types"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// fakeLimiter records the limits set, as "<cgroup> <uuid> <MiB>", and fails when err is set.
type fakeLimiter struct {
	set []string
	err error
}

func (f *fakeLimiter) Set(cgroup, uuid string, bytes uint64) error {
	if f.err != nil {
		return f.err
	}
	f.set = append(f.set, fmt.Sprintf("%s %s %d", cgroup, uuid, bytes>>20))
	return nil
}

var _ memoryLimiter = (*fakeLimiter)(nil)

// limitsPlugin is a plugin in mode sc.Mode with 4 slots per card that sets kernel memory limits
// through lim, finding pods' cgroups under root.
func limitsPlugin(t *testing.T, sc SharingConfig, lim memoryLimiter, backend, root string) *Plugin {
	t.Helper()
	sc.CgroupRoot = root
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: testCards(4, nil), Shares: 4,
		Sharing: sc, MemoryLimiter: lim, MemoryBackend: backend, Log: logr.Discard(), CacheWait: 20 * time.Millisecond})
	p.kubeletRecord = agreeing(p)
	p.MarkSynced()
	p.SetSharingHealth(nil)
	return p
}

// mkdirs makes folders under root.
func mkdirs(t *testing.T, root string, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestInventorySaysWhatHoldsSharedContainers(t *testing.T) {
	none := DefaultSharingConfig()
	for _, c := range []struct {
		sc      SharingConfig
		backend string
		want    *annotations.Sharing
	}{
		{none, "", nil}, // mode none without kernel limits: no field, as before
		{none, nvidia.MemoryLimitsDmem, &annotations.Sharing{Mode: "none", Ready: true, EnforcementV: 1, Memory: "kernel", Compute: "none"}},
		{mpsConfig(), "", &annotations.Sharing{Mode: "mps", Ready: true, EnforcementV: 1, Memory: "mps-daemon", Compute: "mps-daemon"}},
		{mpsConfig(), nvidia.MemoryLimitsDmem, &annotations.Sharing{Mode: "mps", Ready: true, EnforcementV: 1, Memory: "kernel", Compute: "mps-daemon"}},
		{hamiConfig(), "", &annotations.Sharing{Mode: "hami-core", Ready: true, EnforcementV: 1, Memory: "client-env", Compute: "client-env"}},
		{hamiConfig(), nvidia.MemoryLimitsDriver, &annotations.Sharing{Mode: "hami-core", Ready: true, EnforcementV: 1, Memory: "driver", Compute: "client-env"}},
	} {
		var lim memoryLimiter
		if c.backend != "" {
			lim = &fakeLimiter{}
		}
		p := limitsPlugin(t, c.sc, lim, c.backend, t.TempDir())
		if diff := cmp.Diff(c.want, p.Inventory().Sharing); diff != "" {
			t.Errorf("mode %s, backend %q: inventory sharing (-want +got):\n%s", c.sc.Mode, c.backend, diff)
		}
		if _, err := annotations.EncodeInventory(p.Inventory()); err != nil {
			t.Errorf("mode %s, backend %q: %v", c.sc.Mode, c.backend, err)
		}
		opts, _ := p.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
		if !opts.PreStartRequired || !opts.GetPreferredAllocationAvailable {
			t.Errorf("mode %s, backend %q: options %+v, want PreStartRequired always (every start is verified)", c.sc.Mode, c.backend, opts)
		}
	}
}

func TestPreStartCapsThePodAtItsSharedReservationPerCard(t *testing.T) {
	slot := func(card, k int) string { return annotations.SlotID(uuidOf(card), k) }
	for _, layout := range []struct {
		name string
		dirs []string
		pod  string // the pod's cgroup, relative to the root
	}{
		{"systemd driver", []string{"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_other.slice/cri-containerd-1.scope",
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_train.slice"},
			"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-poduid_train.slice"},
		{"cgroupfs driver", []string{"kubepods/besteffort/poduid-other/abc", "kubepods/burstable/poduid-train"}, "kubepods/burstable/poduid-train"},
	} {
		t.Run(layout.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, layout.dirs...)
			lim := &fakeLimiter{}
			p := limitsPlugin(t, hamiConfig(), lim, nvidia.MemoryLimitsDmem, root)
			// Two app containers share card 0 (10000 + 15000 MiB) and one of them card 1 too; an
			// init container takes 30000 MiB of card 0 before them; a whole card (2) is no share.
			p.UpsertPod(newPod("train",
				ctr{name: "warmup", init: true, ids: []string{slot(0, 2)}, memMiB: 30000},
				ctr{name: "a", ids: []string{slot(0, 0), slot(1, 0)}, memMiB: 10000},
				ctr{name: "b", ids: []string{slot(0, 1)}, memMiB: 15000},
			).obj(t))
			p.UpsertPod(newPod("whole", ctr{name: "main", ids: []string{slot(2, 0)}}).obj(t))
			for _, ids := range [][]string{{slot(0, 2)}, {slot(0, 0), slot(1, 0)}, {slot(0, 1)}, {slot(2, 0)}} {
				if _, err := allocateOne(p, ids); err != nil {
					t.Fatalf("allocate %v: %v", ids, err)
				}
			}
			if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{slot(0, 1)}}); err != nil {
				t.Fatal(err)
			}
			cg := filepath.Join(root, layout.pod)
			// Card 0: max(init 30000, app 10000 + 15000) = 30000; card 1: 10000.
			want := []string{cg + " " + uuidOf(0) + " 30000", cg + " " + uuidOf(1) + " 10000"}
			if diff := cmp.Diff(want, lim.set); diff != "" {
				t.Errorf("limits set (-want +got):\n%s", diff)
			}
			lim.set = nil
			if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{slot(2, 0)}}); err != nil {
				t.Fatal(err)
			}
			if len(lim.set) != 0 {
				t.Errorf("a whole-card container's pod got limits: %v", lim.set)
			}
		})
	}
}

func TestPreStartFailsTheContainerWhenTheLimitCannotBeSet(t *testing.T) {
	slot := annotations.SlotID(uuidOf(0), 0)
	for _, c := range []struct {
		name string
		dirs []string
		err  error
		want string
	}{
		{"no cgroup of the pod", []string{"kubepods/burstable/poduid-other"}, nil, "no cgroup of the pod uid-p"},
		{"NVML refuses", []string{"kubepods/burstable/poduid-p"}, errors.New("Insufficient Permissions"), "Insufficient Permissions"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			mkdirs(t, root, c.dirs...)
			p := limitsPlugin(t, hamiConfig(), &fakeLimiter{err: c.err}, nvidia.MemoryLimitsDriver, root)
			p.UpsertPod(newPod("p", ctr{name: "main", ids: []string{slot}, memMiB: 20000}).obj(t))
			if _, err := allocateOne(p, []string{slot}); err != nil {
				t.Fatal(err)
			}
			_, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{slot}})
			st, _ := status.FromError(err)
			if err == nil || st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "cardinal: memory-limit: pod default/p") ||
				!strings.Contains(st.Message(), c.want) {
				t.Errorf("err = %v, want a memory-limit refusal naming the pod and %q", err, c.want)
			}
		})
	}
}

func TestPreStartWithoutKernelLimitsDoesNothing(t *testing.T) {
	slot := annotations.SlotID(uuidOf(0), 0)
	p := limitsPlugin(t, mpsConfig(), nil, "", "/nonexistent")
	p.UpsertPod(newPod("p", ctr{name: "main", ids: []string{slot}, memMiB: 20000}).obj(t))
	if _, err := allocateOne(p, []string{slot}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: []string{slot}}); err != nil {
		t.Errorf("PreStartContainer without kernel limits: %v", err)
	}
}

func TestFindPodCgroup(t *testing.T) {
	root := t.TempDir()
	uid := types.UID("6d1f4bd4-0f5e-4c43-a3a3-8f1c52f0a001")
	mkdirs(t, root,
		"kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod6d1f4bd4_0f5e_4c43_a3a3_8f1c52f0a001.slice",
		"kubepods/pod11111111-0000-0000-0000-000000000000/6d1f4bd4-0f5e-4c43-a3a3-8f1c52f0a001") // a container folder of another pod
	got, err := findPodCgroup(root, uid)
	want := filepath.Join(root, "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod6d1f4bd4_0f5e_4c43_a3a3_8f1c52f0a001.slice")
	if err != nil || got != want {
		t.Errorf("findPodCgroup = %q, %v; want %q", got, err, want)
	}
	if _, err := findPodCgroup(root, "0000"); !errors.Is(err, errNoPodCgroup) {
		t.Errorf("absent pod: %v, want errNoPodCgroup", err)
	}
}

func TestPreStartLimitsTheLivePodThatHoldsTheIDs(t *testing.T) {
	slot := []string{annotations.SlotID(uuidOf(0), 0)}
	root := t.TempDir()
	mkdirs(t, root, "kubepods/burstable/poduid-old", "kubepods/burstable/poduid-new")
	lim := &fakeLimiter{}
	p := limitsPlugin(t, hamiConfig(), lim, nvidia.MemoryLimitsDmem, root)
	old := newPod("old", ctr{name: "main", ids: slot, memMiB: 10000}).obj(t)
	p.UpsertPod(old)
	if _, err := allocateOne(p, slot); err != nil {
		t.Fatal(err)
	}
	// The first pod ends; the kubelet gives its slot to the next one.
	old.Status.Phase = "Succeeded"
	p.UpsertPod(old)
	p.UpsertPod(newPod("new", ctr{name: "main", ids: slot, memMiB: 15000}).obj(t))
	if _, err := allocateOne(p, slot); err != nil {
		t.Fatal(err)
	}
	if _, err := p.PreStartContainer(context.Background(), &pluginapi.PreStartContainerRequest{DevicesIds: slot}); err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(root, "kubepods/burstable/poduid-new") + " " + uuidOf(0) + " 15000"}
	if diff := cmp.Diff(want, lim.set); diff != "" {
		t.Errorf("limits set (-want +got):\n%s", diff)
	}
}
