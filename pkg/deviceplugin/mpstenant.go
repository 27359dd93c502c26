package deviceplugin

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/cardinal-gpu/cardinal/pkg/filecopy"
)

// MPS tenants. An mps node serves the shared containers of one namespace at a time
// (ReasonOtherTenant), and they reach the daemon through host folders: the pipe folder (mounted
// read-only into them, so no tenant can remove or replace the daemon's socket or its ready file)
// and the shm tmpfs (read-write: MPS clients and the server share memory there). So that nothing a
// tenant leaves there reaches the next, the plugin asks the daemon for a fresh start whenever the
// node's tenant changes: it writes MPSTenantRequest in --mps-tenant-dir ("epoch=<n>" and
// "namespace=<ns>", n one more than before), and the chart's daemon script
// (charts/cardinal/files/mps-daemon.sh) quits the control daemon and its servers, empties the shm
// tmpfs and the pipe folder, starts again and writes epoch=<n> in its ready file. Until the ready
// file names the epoch asked for, the node is not ready for shared containers, and Allocate waits
// for it (at most tenantSwitchWait) before it serves any.

// MPSTenantRequest is the file the plugin writes in --mps-tenant-dir.
const MPSTenantRequest = "request"

// tenantSwitchWait bounds how long Allocate waits for the daemon to start afresh for a new tenant.
const tenantSwitchWait = 60 * time.Second

// tenantPoll is how often the daemon is checked while a switch is pending.
const tenantPoll = 100 * time.Millisecond

// mpsTenants is the node's MPS tenant as the plugin asked the daemon for it.
type mpsTenants struct {
	file string

	mu        sync.Mutex
	namespace string
	epoch     uint64
	// done is closed once the daemon vouches for epoch; nil when no switch was asked for since start.
	done chan struct{}
	// asked is when the last switch was asked for.
	asked time.Time
	// check checks the daemon and reports the result (set by watch; nil before).
	check func(context.Context)
	// kick wakes the switch watcher.
	kick chan struct{}
}

// loadMPSTenants reads the last request from dir (none: epoch 0, no namespace).
func loadMPSTenants(dir string) (*mpsTenants, error) {
	t := &mpsTenants{file: filepath.Join(dir, MPSTenantRequest), kick: make(chan struct{}, 1)}
	b, err := os.ReadFile(t.file)
	if errors.Is(err, fs.ErrNotExist) {
		return t, nil
	}
	if err != nil {
		return t, fmt.Errorf("MPS tenant request: %w", err)
	}
	epoch, ns, err := parseTenantRequest(b)
	if err != nil {
		return t, fmt.Errorf("MPS tenant request %s: %w", t.file, err)
	}
	t.epoch, t.namespace = epoch, ns
	return t, nil
}

// parseTenantRequest reads "epoch=<n>" and "namespace=<ns>" lines.
func parseTenantRequest(b []byte) (epoch uint64, namespace string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	seen := false
	for sc.Scan() {
		k, v, _ := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		switch k {
		case "epoch":
			if epoch, err = strconv.ParseUint(v, 10, 64); err != nil {
				return 0, "", fmt.Errorf("epoch %q: %w", v, err)
			}
			seen = true
		case "namespace":
			namespace = v
		}
	}
	if !seen {
		return 0, "", errors.New("no epoch")
	}
	return epoch, namespace, nil
}

// wanted is the epoch the daemon must vouch for.
func (t *mpsTenants) wanted() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// switchTo asks the daemon to start afresh for namespace, unless it is the node's tenant already;
// it reports whether it asked.
func (t *mpsTenants) switchTo(namespace string) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if namespace == t.namespace {
		return false, nil
	}
	epoch := t.epoch + 1
	data := fmt.Sprintf("epoch=%d\nnamespace=%s\n", epoch, namespace)
	if err := filecopy.WriteAtomic(t.file, []byte(data)); err != nil {
		return false, fmt.Errorf("MPS tenant request: %w", err)
	}
	t.epoch, t.namespace = epoch, namespace
	t.done, t.asked = make(chan struct{}), time.Now()
	select {
	case t.kick <- struct{}{}:
	default:
	}
	return true, nil
}

// served records that the daemon vouched for epoch: a pending switch to it is over.
func (t *mpsTenants) served(epoch uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if epoch != t.epoch || t.done == nil {
		return
	}
	select {
	case <-t.done:
	default:
		close(t.done)
	}
}

// pending returns the channel closed when the switch asked for last is over; nil when it is.
func (t *mpsTenants) pending() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done == nil {
		return nil
	}
	select {
	case <-t.done:
		return nil
	default:
		return t.done
	}
}

// switching reports whether a switch is pending, asked for less than d ago.
func (t *mpsTenants) switching(d time.Duration) bool {
	if t.pending() == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return time.Since(t.asked) < d
}

// recheck checks the daemon now and reports the result, once watch runs.
func (t *mpsTenants) recheck(ctx context.Context) {
	t.mu.Lock()
	check := t.check
	t.mu.Unlock()
	if check != nil {
		check(ctx)
	}
}

// wait waits for a pending switch to end, at most d (or until ctx ends).
func (t *mpsTenants) wait(ctx context.Context, d time.Duration) {
	ch := t.pending()
	if ch == nil {
		return
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-timer.C:
	}
}

// watch checks the daemon every tenantPoll while a switch is pending, and reports each result
// through set (which the probe's success ends the switch through), until ctx ends.
func (t *mpsTenants) watch(ctx context.Context, probe SharingProbe, set func(error), log logr.Logger) {
	t.mu.Lock()
	t.check = func(ctx context.Context) { set(probe.Check(ctx)) }
	t.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
		}
		started := time.Now()
		for t.pending() != nil && ctx.Err() == nil {
			err := probe.Check(ctx)
			set(err)
			if err == nil {
				log.Info("MPS daemon started afresh for the node's new tenant", "epoch", t.wanted(), "took", time.Since(started).String())
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(tenantPoll):
			}
		}
	}
}

// switchTenantLocked asks the daemon for a fresh start when e is a shared container's pod of
// another namespace than the node's tenant, and no other namespace shares cards here (then e is
// refused: ReasonOtherTenant). p.mu held.
func (p *Plugin) switchTenantLocked(e *podEntry) {
	if p.tenants == nil || e.Gone || !e.HasAssignment || !e.sharesCards() || p.otherTenant(e) != nil {
		return
	}
	asked, err := p.tenants.switchTo(e.Namespace)
	if err != nil {
		p.log.Error(err, "cannot ask the MPS daemon for a fresh start for a new tenant", "namespace", e.Namespace)
		return
	}
	if asked {
		p.log.Info("asked the MPS daemon for a fresh start for the node's new tenant", "namespace", e.Namespace, "epoch", p.tenants.wanted(), "pod", e.key())
	}
}

// sharesCards reports whether a container of the pod shares its cards.
func (e *podEntry) sharesCards() bool {
	for _, r := range e.Requests {
		if r.Shared {
			return true
		}
	}
	return false
}
