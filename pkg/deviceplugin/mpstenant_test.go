package deviceplugin

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// writeMPSReadyEpoch writes the daemon's ready file for shares and a tenant epoch, dated at.
func writeMPSReadyEpoch(t *testing.T, dir string, shares int, epoch uint64, at time.Time) {
	t.Helper()
	file := filepath.Join(dir, MPSReady)
	content := fmt.Sprintf("shares=%d computeMode=EXCLUSIVE_PROCESS activeThreadPercentage=%d epoch=%d\nGPU-00 pinnedMemLimitMiB=20480\n", shares, 100/shares, epoch)
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(file, at, at); err != nil {
		t.Fatal(err)
	}
}

func listenControl(t *testing.T, dir string) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, MPSControl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
}

func readRequest(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, MPSTenantRequest))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestMPSProbeNeedsTheDaemonToAnswerNow: the ready file must have been refreshed lately (the
// daemon script does so each time get_server_list answers); a stale one fails the check, also
// behind a named pipe, which takes no test connection and used to pass on its existence.
func TestMPSProbeNeedsTheDaemonToAnswerNow(t *testing.T) {
	dir := t.TempDir()
	listenControl(t, dir)
	probe := mpsProbe{pipeDir: dir, shares: 4}
	writeMPSReady(t, dir, 4, time.Now())
	if err := probe.Check(context.Background()); err != nil {
		t.Fatalf("fresh ready file: %v", err)
	}
	// The control socket is older than the file: only the refresh is stale.
	old := time.Now().Add(-2 * time.Minute)
	if err := os.Chtimes(filepath.Join(dir, MPSControl), old, old); err != nil {
		t.Fatal(err)
	}
	writeMPSReady(t, dir, 4, time.Now().Add(-MPSReadyMaxAge-5*time.Second))
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "was last refreshed") {
		t.Fatalf("stale ready file: %v", err)
	}

	fifoDir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(fifoDir, MPSControl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(filepath.Join(fifoDir, MPSControl), old, old); err != nil {
		t.Fatal(err)
	}
	fifo := mpsProbe{pipeDir: fifoDir, shares: 4}
	writeMPSReady(t, fifoDir, 4, time.Now().Add(-MPSReadyMaxAge-5*time.Second))
	if err := fifo.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "was last refreshed") {
		t.Fatalf("named pipe, stale ready file: %v", err)
	}
	writeMPSReady(t, fifoDir, 4, time.Now())
	if err := fifo.Check(context.Background()); err != nil {
		t.Fatalf("named pipe, fresh ready file: %v", err)
	}
}

// TestMPSTenantSwitchStartsTheDaemonAfresh: the first shared pod of a namespace that is not the
// node's MPS tenant has the plugin ask the daemon for a fresh start (a new epoch, written for the
// daemon script); Allocate waits until the daemon's ready file names that epoch, and then serves.
// Pods of the same tenant ask for nothing; the next namespace, once the first is gone, asks again;
// the request survives a plugin restart.
func TestMPSTenantSwitchStartsTheDaemonAfresh(t *testing.T) {
	pipe, tenants := t.TempDir(), t.TempDir()
	listenControl(t, pipe)
	writeMPSReadyEpoch(t, pipe, 4, 0, time.Now())
	cfg := mpsConfig()
	cfg.MPSPipeDir, cfg.MPSTenantDir = pipe, tenants
	p := sharingPlugin(t, cfg, 4)
	probe := p.sharingProbe(4)
	if err := probe.Check(context.Background()); err != nil {
		t.Fatalf("no tenant yet, daemon at epoch 0: %v", err)
	}
	p.SetSharingHealth(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.tenants.watch(ctx, probe, func(err error) { p.SetSharingHealth(err) }, logr.Discard())

	inNS := func(ns string, b *podBuilder) *corev1.Pod {
		pod := b.obj(t)
		pod.Namespace = ns
		return pod
	}
	slot := func(card, k int) []string { return []string{annotations.SlotID(uuidOf(card), k)} }

	p.UpsertPod(inNS("team-a", newPod("a", ctr{name: "main", ids: slot(0, 0), memMiB: 20000})))
	if got := readRequest(t, tenants); got != "epoch=1\nnamespace=team-a\n" {
		t.Fatalf("request for team-a: %q", got)
	}
	type result struct {
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		_, err := allocateOne(p, slot(0, 0))
		done <- result{err, time.Now()}
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("Allocate returned (%v) before the daemon started afresh", r.err)
	default:
	}
	// The check fails while the daemon restarts, yet the inventory stays ready: team-a's next pods
	// may come (they wait in Allocate), and no other namespace's may anyway.
	if err := probe.Check(context.Background()); err == nil {
		t.Fatal("the daemon still at epoch 0 passed the check")
	}
	p.SetSharingHealth(probe.Check(context.Background()))
	if s := p.Inventory().Sharing; s == nil || !s.Ready {
		t.Errorf("inventory sharing %+v during a tenant switch, want ready", s)
	}
	// The daemon script restarts: empty folders, a new socket, the ready file for epoch 1.
	restarted := time.Now()
	writeMPSReadyEpoch(t, pipe, 4, 1, restarted)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Allocate once the daemon serves epoch 1: %v", r.err)
		}
		if r.at.Before(restarted) {
			t.Fatal("Allocate served before the daemon started afresh")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Allocate still waits after the daemon served epoch 1")
	}

	p.UpsertPod(inNS("team-a", newPod("a2", ctr{name: "main", ids: slot(0, 1), memMiB: 20000})))
	if got := readRequest(t, tenants); got != "epoch=1\nnamespace=team-a\n" {
		t.Fatalf("a second pod of the same tenant asked for a fresh start: %q", got)
	}
	if _, err := allocateOne(p, slot(0, 1)); err != nil {
		t.Fatalf("same tenant: %v", err)
	}
	// Another namespace while team-a shares cards: refused (other-tenant), nothing asked.
	p.UpsertPod(inNS("team-b", newPod("b", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	if got := readRequest(t, tenants); got != "epoch=1\nnamespace=team-a\n" {
		t.Fatalf("a pod refused as another tenant asked for a fresh start: %q", got)
	}
	p.DeletePod(inNS("team-b", newPod("b", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	for _, name := range []string{"a", "a2"} {
		p.DeletePod(inNS("team-a", newPod(name, ctr{name: "main", ids: slot(0, 0), memMiB: 20000})))
	}
	p.UpsertPod(inNS("team-b", newPod("b2", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	if got := readRequest(t, tenants); got != "epoch=2\nnamespace=team-b\n" {
		t.Fatalf("request for team-b: %q", got)
	}
	if err := probe.Check(context.Background()); err == nil || !strings.Contains(err.Error(), "a fresh start for the node's new tenant is under way") {
		t.Fatalf("daemon still at epoch 1: %v", err)
	}
	writeMPSReadyEpoch(t, pipe, 4, 2, time.Now())
	if _, err := allocateOne(p, slot(1, 0)); err != nil {
		t.Fatalf("second tenant once the daemon served epoch 2: %v", err)
	}

	// A switch the daemon never completes stops counting as ready after tenantSwitchWait.
	p.UpsertPod(inNS("team-a", newPod("a3", ctr{name: "main", ids: slot(2, 0), memMiB: 20000})))
	p.DeletePod(inNS("team-b", newPod("b2", ctr{name: "main", ids: slot(1, 0), memMiB: 20000})))
	p.UpsertPod(inNS("team-a", newPod("a4", ctr{name: "main", ids: slot(2, 1), memMiB: 20000})))
	p.SetSharingHealth(probe.Check(context.Background()))
	if s := p.Inventory().Sharing; !s.Ready {
		t.Errorf("inventory sharing %+v just after a switch was asked for, want ready", s)
	}
	p.tenants.mu.Lock()
	p.tenants.asked = time.Now().Add(-tenantSwitchWait - time.Second)
	p.tenants.mu.Unlock()
	p.SetSharingHealth(probe.Check(context.Background()))
	if s := p.Inventory().Sharing; s.Ready {
		t.Errorf("inventory sharing %+v for a switch the daemon never completed, want not ready", s)
	}
	if got := readRequest(t, tenants); got != "epoch=3\nnamespace=team-a\n" {
		t.Fatalf("request back to team-a: %q", got)
	}

	again, err := loadMPSTenants(tenants)
	if err != nil || again.wanted() != 3 || again.namespace != "team-a" {
		t.Fatalf("after a restart: epoch %d namespace %q (%v), want 3 team-a", again.wanted(), again.namespace, err)
	}
	if again.pending() != nil {
		t.Error("a restarted plugin waits for a switch it did not ask for")
	}
}
