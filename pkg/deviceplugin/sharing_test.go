package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// fakeProbe is a SharingProbe whose answer the test sets.
type fakeProbe struct{ err error }

func (f *fakeProbe) Check(context.Context) error { return f.err }

var _ SharingProbe = (*fakeProbe)(nil)

func sharingPlugin(t *testing.T, sc SharingConfig, shares int) *Plugin {
	t.Helper()
	p := newPlugin(pluginOptions{Node: testNode, Names: annotations.DefaultResourceNames(), Cards: testCards(4, nil), Shares: shares,
		Sharing: sc, Log: logr.Discard(), CacheWait: 20 * time.Millisecond})
	p.MarkSynced()
	return p
}

func mpsConfig() SharingConfig {
	c := DefaultSharingConfig()
	c.Mode = annotations.SharingMPS
	return c
}

func hamiConfig() SharingConfig {
	c := DefaultSharingConfig()
	c.Mode = annotations.SharingHAMiCore
	return c
}

func allocateOne(p *Plugin, ids []string) (*pluginapi.ContainerAllocateResponse, error) {
	resp, err := p.Allocate(context.Background(), &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	return resp.ContainerResponses[0], nil
}

func TestSharingModesAllocateResponse(t *testing.T) {
	// Cards 1 and 3 (NVML order = CUDA order here). The shared container asks for 20000 MiB and 30 %
	// of each card; the whole-card container holds slot 0 of each card and asks for nothing.
	slots := []string{annotations.SlotID(uuidOf(1), 2), annotations.SlotID(uuidOf(3), 0)}
	shared := ctr{name: "main", ids: slots, memMiB: 20000, cores: 30}
	whole := ctr{name: "main", ids: slots}
	key := cdiAnnotationKey("uid-a", "main")
	base := map[string]string{EnvVisibleDevices: "GPU-01,GPU-03", EnvCUDADeviceOrder: "PCI_BUS_ID"}
	env := func(kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	hamiEnv := []string{EnvMemoryLimitPrefix + "0", "20000m", EnvMemoryLimitPrefix + "1", "20000m", EnvSMLimit, "30"}
	mpsEnv := []string{EnvMPSMemoryLimit, "0=20000M,1=20000M", EnvMPSThreadPercentage, "30"}
	tests := []struct {
		name string
		sc   SharingConfig
		c    ctr
		want responseView
	}{
		{name: "none, shared: every limit variable, advisory, no mount", sc: DefaultSharingConfig(), c: shared,
			want: responseView{Envs: env(append(hamiEnv, mpsEnv...)...)}},
		{name: "none, whole cards", sc: DefaultSharingConfig(), c: whole, want: responseView{Envs: env()}},
		{name: "mps, shared: pipe directory, /dev/shm and MPS limits only", sc: mpsConfig(), c: shared,
			want: responseView{Envs: env(append(mpsEnv, EnvMPSPipeDirectory, "/run/cardinal/mps/pipe")...), Mounts: []mount{
				{ContainerPath: "/run/cardinal/mps/pipe", HostPath: "/run/cardinal/mps/pipe", ReadOnly: true},
				{ContainerPath: "/dev/shm", HostPath: "/run/cardinal/mps/shm"},
			}}},
		{name: "mps, whole cards: not an MPS client", sc: mpsConfig(), c: whole, want: responseView{Envs: env()}},
		{name: "mps without a shm folder, shared", sc: func() SharingConfig { c := mpsConfig(); c.MPSShmDir = ""; return c }(), c: shared,
			want: responseView{Envs: env(append(mpsEnv, EnvMPSPipeDirectory, "/run/cardinal/mps/pipe")...), Mounts: []mount{
				{ContainerPath: "/run/cardinal/mps/pipe", HostPath: "/run/cardinal/mps/pipe", ReadOnly: true},
			}}},
		{name: "hami-core, shared: library, ld.so.preload, HAMi-core limits and cache", sc: hamiConfig(), c: shared,
			want: responseView{Envs: env(append(hamiEnv, EnvHAMiCoreSharedCache, "/tmp/cardinal-vgpu-"+key+".cache")...), Mounts: []mount{
				{ContainerPath: "/usr/local/vgpu/libvgpu.so", HostPath: "/usr/local/vgpu/libvgpu.so", ReadOnly: true},
				{ContainerPath: "/etc/ld.so.preload", HostPath: "/var/lib/cardinal/hami-core/ld.so.preload", ReadOnly: true},
				{ContainerPath: "/tmp/vgpulock", HostPath: "/tmp/vgpulock"}, // HAMi-core's node-wide lock folder
			}}},
		{name: "hami-core, whole cards: nothing preloaded", sc: hamiConfig(), c: whole, want: responseView{Envs: env()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sharingPlugin(t, tt.sc, 4)
			p.SetSharingHealth(nil)
			p.UpsertPod(newPod("a", tt.c).obj(t))
			r, err := allocateOne(p, tt.c.ids)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, viewOf(r)); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSharingNotReadyRefusesSharedServesWhole(t *testing.T) {
	for _, sc := range []SharingConfig{mpsConfig(), hamiConfig()} {
		t.Run(sc.Mode, func(t *testing.T) {
			p := sharingPlugin(t, sc, 4)
			// Before the first check the mode is not ready.
			if got := p.Inventory().Sharing; got == nil || got.Mode != sc.Mode || got.Ready {
				t.Fatalf("inventory sharing before a check = %+v, want mode %s not ready", got, sc.Mode)
			}
			p.SetSharingHealth(errors.New("control socket missing"))
			p.UpsertPod(newPod("a", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(0), 0)}, memMiB: 20000}).obj(t))
			_, err := allocateOne(p, []string{annotations.SlotID(uuidOf(0), 0)})
			st, _ := status.FromError(err)
			if err == nil || st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "cardinal: sharing-not-ready:") ||
				!strings.Contains(st.Message(), "control socket missing") || !strings.Contains(st.Message(), "default/a") {
				t.Fatalf("shared container while not ready: err = %v, want sharing-not-ready naming pod and cause", err)
			}
			// A whole-card container on the same node is served: the slots stay healthy.
			p.UpsertPod(newPod("b", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(1), 0)}}).obj(t))
			if _, err := allocateOne(p, []string{annotations.SlotID(uuidOf(1), 0)}); err != nil {
				t.Fatalf("whole-card container while not ready: %v", err)
			}
			for id, h := range advertisedHealth(p, 0, 1) {
				if h != pluginapi.Healthy {
					t.Errorf("%s advertised %s while sharing is not ready, want Healthy", id, h)
				}
			}
			// Once ready, the inventory says so and the shared container is served.
			rewrites := 0
			p.devicesChanged = func() { rewrites++ }
			if !p.SetSharingHealth(nil) || p.SetSharingHealth(nil) || rewrites != 1 {
				t.Errorf("SetSharingHealth(nil) twice: rewrites = %d, want 1 (only on change)", rewrites)
			}
			if got := p.Inventory().Sharing; got == nil || !got.Ready {
				t.Errorf("inventory sharing after a passing check = %+v, want ready", got)
			}
			// The kubelet rejected "a" for good; a shared container admitted now is served.
			p.UpsertPod(newPod("c", ctr{name: "main", ids: []string{annotations.SlotID(uuidOf(2), 0)}, memMiB: 20000}).obj(t))
			if _, err := allocateOne(p, []string{annotations.SlotID(uuidOf(2), 0)}); err != nil {
				t.Errorf("shared container once ready: %v", err)
			}
		})
	}
}

func TestSharingNoneInventoryHasNoSharingField(t *testing.T) {
	p := sharingPlugin(t, SharingConfig{}, 4)
	if got := p.Inventory().Sharing; got != nil {
		t.Errorf("mode none: inventory sharing = %+v, want none (absent)", got)
	}
}

// writeMPSReady writes the daemon script's ready file for shares, dated at.
func writeMPSReady(t *testing.T, dir string, shares int, at time.Time) {
	t.Helper()
	file := filepath.Join(dir, MPSReady)
	content := fmt.Sprintf("shares=%d computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=%d\nGPU-00 pinnedMemLimitMiB=20480\n", shares, 100/shares)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, at, at); err != nil {
		t.Fatal(err)
	}
}

func TestMPSProbe(t *testing.T) {
	dir := t.TempDir()
	probe := mpsProbe{pipeDir: dir, shares: 4}
	writeMPSReady(t, dir, 4, time.Now().Add(time.Hour))
	if err := probe.Check(context.Background()); err == nil {
		t.Fatal("no control socket: check passed")
	}
	control := filepath.Join(dir, MPSControl)
	if err := os.WriteFile(control, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "neither a socket nor a named pipe") {
		t.Fatalf("regular file: %v", err)
	}
	if err := os.Remove(control); err != nil {
		t.Fatal(err)
	}
	// A socket nobody listens on (the daemon died and left it behind) does not pass.
	l, err := net.Listen("unix", control)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "does not answer") {
		t.Fatalf("stale socket: %v", err)
	}
	if err := os.Remove(control); err != nil {
		t.Fatal(err)
	}
	l, err = net.Listen("unix", control)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := probe.Check(context.Background()); err != nil {
		t.Fatalf("listening socket: %v", err)
	}
	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, MPSControl), 0o600); err != nil {
		t.Fatal(err)
	}
	writeMPSReady(t, fifoDir, 4, time.Now().Add(time.Hour))
	if err := (mpsProbe{pipeDir: fifoDir, shares: 4}).Check(context.Background()); err != nil {
		t.Fatalf("named pipe: %v", err)
	}
}

// A daemon that answers on its socket but cannot start a server (no cards, refused compute mode,
// limits not set) never vouches for itself: the node is not ready for shared containers. Nor is it
// when the file is an earlier daemon's, or was written for another share count.
func TestMPSProbeNeedsTheDaemonToVouchForAServer(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, MPSControl))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // the fake daemon: accepts every connection, starts no server
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	probe := mpsProbe{pipeDir: dir, shares: 4}
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing says a server can start") {
		t.Fatalf("socket answers, no ready file: %v", err)
	}
	writeMPSReady(t, dir, 4, time.Now().Add(-time.Hour))
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "older than the control socket") {
		t.Fatalf("ready file of an earlier daemon: %v", err)
	}
	writeMPSReady(t, dir, 2, time.Now().Add(time.Hour))
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "for shares=2, the plugin advertises 4") {
		t.Fatalf("ready file for another share count: %v", err)
	}
	writeMPSReady(t, dir, 4, time.Now().Add(time.Hour))
	if err := probe.Check(context.Background()); err != nil {
		t.Fatalf("daemon vouched for shares 4: %v", err)
	}
}

func TestHAMiCoreProbe(t *testing.T) {
	lib := filepath.Join(t.TempDir(), "libvgpu.so")
	probe := hamiCoreProbe{library: lib}
	if err := probe.Check(context.Background()); err == nil {
		t.Fatal("missing library: check passed")
	}
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(context.Background()); err == nil {
		t.Fatal("empty library: check passed")
	}
	if err := os.WriteFile(lib, []byte("\x7fELF"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := probe.Check(context.Background()); err != nil {
		t.Fatalf("library present: %v", err)
	}
}

func TestWritePreload(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "hami-core")
	for range 2 { // the second write finds it in place
		if err := writePreload(dir); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, PreloadFile))
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != "/usr/local/vgpu/libvgpu.so\n" {
			t.Fatalf("preload file = %q", b)
		}
	}
}

func TestWatchSharingReportsEveryCheck(t *testing.T) {
	probe := &fakeProbe{err: errors.New("down")}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 16)
	done := make(chan struct{})
	go func() {
		watchSharing(ctx, probe, time.Millisecond, func(err error) {
			select {
			case got <- err:
			default:
			}
		}, logr.Discard())
		close(done)
	}()
	if err := <-got; err == nil {
		t.Fatal("first report: nil, want the probe's error")
	}
	cancel()
	<-done
}

func TestSharingConfigFlagsAndValidate(t *testing.T) {
	c := DefaultSharingConfig()
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	c.AddFlags(fs)
	if !c.KernelMemoryLimits || c.CgroupRoot != "/sys/fs/cgroup" {
		t.Fatalf("defaults %+v: kernel memory limits on, under /sys/fs/cgroup", c)
	}
	if err := fs.Parse([]string{"--sharing-mode=mps", "--mps-pipe-dir=/p", "--mps-shm-dir=", "--sharing-check-interval=1s",
		"--kernel-memory-limits=false", "--cgroup-root=/host/sys/fs/cgroup"}); err != nil {
		t.Fatal(err)
	}
	if c.Mode != "mps" || c.MPSPipeDir != "/p" || c.MPSShmDir != "" || c.CheckInterval != time.Second || c.KernelMemoryLimits || c.CgroupRoot != "/host/sys/fs/cgroup" {
		t.Fatalf("parsed %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tt := range []struct {
		mutate func(*SharingConfig)
		want   string
	}{
		{func(c *SharingConfig) { c.Mode = "vgpu" }, `--sharing-mode: unknown mode "vgpu" (known: none, mps, hami-core)`},
		{func(c *SharingConfig) { c.Mode = "mps"; c.MPSPipeDir = "pipe" }, "--mps-pipe-dir"},
		{func(c *SharingConfig) { c.Mode = "mps"; c.MPSShmDir = "shm" }, "--mps-shm-dir"},
		{func(c *SharingConfig) { c.Mode = "hami-core"; c.HAMiCoreLibrary = "lib.so" }, "--hami-core-library"},
		{func(c *SharingConfig) { c.Mode = "hami-core"; c.HAMiCorePreloadDir = "" }, "--hami-core-preload-dir"},
		{func(c *SharingConfig) { c.Mode = "hami-core"; c.HAMiCoreLockDir = "tmp/vgpulock" }, "--hami-core-lock-dir"},
		{func(c *SharingConfig) { c.Mode = "mps"; c.CheckInterval = 0 }, "--sharing-check-interval"},
		{func(c *SharingConfig) { c.CgroupRoot = "sys/fs/cgroup" }, `--cgroup-root: "sys/fs/cgroup" is not an absolute path`}, // also in mode none
	} {
		c := DefaultSharingConfig()
		tt.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error naming %s", c, err, tt.want)
		}
	}
	none := DefaultSharingConfig()
	none.MPSPipeDir = "relative" // ignored in mode none
	if err := none.Validate(); err != nil {
		t.Errorf("mode none: %v", err)
	}
}

// Mode mps serves shared containers of one namespace at a time: one daemon's /dev/shm and control
// pipe would otherwise be shared between tenants. Another namespace's shared container is refused
// while the first namespace's shared pod lives; whole-card containers of any namespace, and shared
// ones of the same namespace, are served; once the first tenant's pods are gone the other's next pod is
// served.
// hami-core keeps no shared daemon state between containers and is not restricted.
func TestMPSServesSharedContainersOfOneNamespaceAtATime(t *testing.T) {
	inNS := func(t *testing.T, ns string, b *podBuilder) *corev1.Pod {
		pod := b.obj(t)
		pod.Namespace = ns
		return pod
	}
	slot := func(card, k int) []string { return []string{annotations.SlotID(uuidOf(card), k)} }
	p := sharingPlugin(t, mpsConfig(), 4)
	p.SetSharingHealth(nil)
	a := inNS(t, "team-a", newPod("a", ctr{name: "main", ids: slot(0, 0), memMiB: 20000}))
	p.UpsertPod(a)
	if _, err := allocateOne(p, slot(0, 0)); err != nil {
		t.Fatalf("first tenant: %v", err)
	}
	p.UpsertPod(inNS(t, "team-a", newPod("a2", ctr{name: "main", ids: slot(0, 1), memMiB: 20000})))
	if _, err := allocateOne(p, slot(0, 1)); err != nil {
		t.Fatalf("same namespace: %v", err)
	}
	p.UpsertPod(inNS(t, "team-b", newPod("b", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	_, err := allocateOne(p, slot(1, 0))
	st, _ := status.FromError(err)
	if err == nil || st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), "cardinal: other-tenant:") ||
		!strings.Contains(st.Message(), "team-b/b") || !strings.Contains(st.Message(), "namespace team-a") {
		t.Fatalf("second tenant: err = %v, want other-tenant naming both", err)
	}
	p.UpsertPod(inNS(t, "team-b", newPod("whole", ctr{name: "main", ids: slot(2, 0)})))
	if _, err := allocateOne(p, slot(2, 0)); err != nil {
		t.Fatalf("whole-card container of another namespace: %v", err)
	}
	for _, name := range []string{"a", "a2"} {
		pod := inNS(t, "team-a", newPod(name, ctr{name: "main", ids: slot(0, 0), memMiB: 20000}))
		p.DeletePod(pod)
	}
	// The kubelet failed b's admission for good; its controller makes a new pod.
	p.DeletePod(inNS(t, "team-b", newPod("b", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	p.UpsertPod(inNS(t, "team-b", newPod("b2", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	if _, err := allocateOne(p, slot(1, 0)); err != nil {
		t.Fatalf("second tenant once the first is gone: %v", err)
	}

	h := sharingPlugin(t, hamiConfig(), 4)
	h.SetSharingHealth(nil)
	h.UpsertPod(inNS(t, "team-a", newPod("a", ctr{name: "main", ids: slot(0, 0), memMiB: 20000})))
	h.UpsertPod(inNS(t, "team-b", newPod("b", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	for _, ids := range [][]string{slot(0, 0), slot(1, 0)} {
		if _, err := allocateOne(h, ids); err != nil {
			t.Errorf("hami-core %v: %v", ids, err)
		}
	}
}

func TestMakeLockDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "vgpulock")
	for i := 0; i < 2; i++ { // created, then left as it is
		if err := makeLockDir(dir); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode()&os.ModePerm != 0o777 || st.Mode()&os.ModeSticky == 0 {
			t.Errorf("lock folder mode %v, want 1777 (every user writes, none removes another's lock)", st.Mode())
		}
	}
}

func TestMPSRefusesMoreThanOneSlotOfMemoryPerCard(t *testing.T) {
	slot := func(card, k int) []string { return []string{annotations.SlotID(uuidOf(card), k)} }
	// Cards of 81920 MiB in 4 slots: the daemon gives each client 81920 ÷ 4 = 20480 MiB.
	for _, c := range []struct {
		name string
		ctr  ctr
		want string // "" when served
	}{
		{"one slot exactly", ctr{name: "main", memMiB: 20480}, ""},
		{"cores only", ctr{name: "main", cores: 25}, ""},
		{"more than a slot", ctr{name: "main", memMiB: 20481},
			"cardinal: mps-slot: container main of pod default/p reserves 20481 MiB of card GPU-00 (nvidia.com/gpumem=20481), more than one MPS slot: " +
				"this node's MPS daemon gives each client at most 20480 MiB of the card (81920 MiB ÷ 4 shares)"},
		{"a percentage over a slot", ctr{name: "main", memPct: 50}, "reserves 40960 MiB of card GPU-00 (nvidia.com/gpumem-percentage=50)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := sharingPlugin(t, mpsConfig(), 4)
			p.SetSharingHealth(nil)
			c.ctr.ids = slot(0, 0)
			p.UpsertPod(newPod("p", c.ctr).obj(t))
			_, err := allocateOne(p, slot(0, 0))
			st, _ := status.FromError(err)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (err == nil || st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), c.want)):
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
	// hami-core holds each container to its own reservation: any size is served.
	h := sharingPlugin(t, hamiConfig(), 4)
	h.SetSharingHealth(nil)
	h.UpsertPod(newPod("p", ctr{name: "main", ids: slot(0, 0), memMiB: 40000}).obj(t))
	if _, err := allocateOne(h, slot(0, 0)); err != nil {
		t.Errorf("hami-core, two slots of memory: %v", err)
	}
}

// With --mps-compute-mode EXCLUSIVE_PROCESS only the MPS server may use the cards: a whole-card
// container is refused (the extender keeps the rule too) and the inventory says exclusiveCards;
// shared containers are served. With DEFAULT, or not said, whole cards are served as before.
func TestMPSExclusiveCardsRefuseWholeCardContainers(t *testing.T) {
	slot := func(card, k int) []string { return []string{annotations.SlotID(uuidOf(card), k)} }
	for _, mode := range []string{MPSComputeExclusive, MPSComputeDefault, ""} {
		t.Run("mode "+mode, func(t *testing.T) {
			sc := mpsConfig()
			sc.MPSComputeMode = mode
			p := sharingPlugin(t, sc, 4)
			p.SetSharingHealth(nil)
			exclusive := mode == MPSComputeExclusive
			if inv := p.Inventory(); inv.Sharing == nil || inv.Sharing.ExclusiveCards != exclusive {
				t.Errorf("inventory sharing %+v, want exclusiveCards %v", inv.Sharing, exclusive)
			}
			p.UpsertPod(newPod("whole", ctr{name: "main", ids: slot(1, 0)}).obj(t))
			_, err := allocateOne(p, slot(1, 0))
			st, _ := status.FromError(err)
			switch {
			case exclusive && (err == nil || st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(),
				"cardinal: exclusive-cards: container main of pod default/whole takes cards whole, but this node's MPS daemon runs its cards in EXCLUSIVE_PROCESS")):
				t.Errorf("whole-card container: err = %v, want exclusive-cards", err)
			case !exclusive && err != nil:
				t.Errorf("whole-card container refused: %v", err)
			}
			p.UpsertPod(newPod("shared", ctr{name: "main", ids: slot(0, 0), memMiB: 10000}).obj(t))
			if _, err := allocateOne(p, slot(0, 0)); err != nil {
				t.Errorf("shared container refused: %v", err)
			}
		})
	}
	sc := mpsConfig()
	sc.MPSComputeMode = "exclusive"
	if err := sc.Validate(); err == nil || !strings.Contains(err.Error(), `--mps-compute-mode: unknown mode "exclusive"`) {
		t.Errorf("Validate: %v", err)
	}
}
