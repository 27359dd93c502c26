package sim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/cardinal-gpu/cardinal/pkg/device/nvidia"
)

// Load reads and parses a simulation file and returns the cards of node.
func Load(path, node string) ([]Card, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read simulation file: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f.Cards(node)
}

// Watch follows the simulation file at path until ctx ends and applies health changes of node's
// cards to s, as if NVML reported them: a card turning `healthy: false` raises a critical XID, one
// turning healthy again passes the next probe; `fault` and `mig` changes apply at once (fault: lost
// raises XID 79 and fails every call for the card), and so does the health of MIG instances (one
// turning `healthy: false` raises XID XidInstanceFault on it). Other changes (cards added, removed,
// re-described; MIG instances added, removed or re-described) need a restart and are only logged. A file that does not parse is logged and ignored; the last good
// state stays.
func (s *Server) Watch(ctx context.Context, path, node string, log logr.Logger) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch simulation file: %w", err)
	}
	defer w.Close()
	// Watch the folder: editors and `kubectl cp`-style updates replace the file rather than write it.
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watch %s: %w", filepath.Dir(path), err)
	}
	base := filepath.Base(path)
	apply := func() {
		cards, err := Load(path, node)
		if err != nil {
			log.Error(err, "simulation file ignored; keeping the last good state", "path", path)
			return
		}
		s.apply(cards, log)
	}
	apply() // changes made between New and Watch
	var pending <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if filepath.Base(ev.Name) == base {
				// Let a burst of writes settle before reading.
				pending = time.After(50 * time.Millisecond)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			log.Error(err, "simulation file watch error")
		case <-pending:
			pending = nil
			apply()
		}
	}
}

func (s *Server) apply(cards []Card, log logr.Logger) {
	s.mu.Lock()
	known := make(map[string]Card, len(s.devices))
	for _, d := range s.devices {
		known[d.card.UUID] = d.card
	}
	s.mu.Unlock()
	if len(cards) != len(known) {
		log.Info("simulation file changed the number of cards; restart the plugin to apply it", "was", len(known), "now", len(cards))
	}
	for _, c := range cards {
		k, ok := known[c.UUID]
		if !ok {
			log.Info("simulation file names a card this plugin did not start with; restart to apply it", "gpu", c.UUID)
			continue
		}
		if k.Model != c.Model || k.MemoryMiB != c.MemoryMiB || k.NUMA != c.NUMA {
			log.Info("simulation file re-describes a card; restart to apply it (health still applies)", "gpu", c.UUID)
		}
		if s.SetHealth(c.UUID, c.Healthy) {
			log.Info("simulated card health changed", "gpu", c.UUID, "healthy", c.Healthy)
		}
		if s.SetFault(c.UUID, c.Fault) {
			log.Info("simulated card fault changed", "gpu", c.UUID, "fault", string(c.Fault))
		}
		if s.SetMIG(c.UUID, c.MIG) {
			log.Info("simulated card MIG mode changed", "gpu", c.UUID, "mig", migText(c.MIG))
		}
		s.applyInstances(k, c, log)
	}
}

// applyInstances applies the health of card c's MIG instances; was is the card as the server
// started with it.
func (s *Server) applyInstances(was, c Card, log logr.Logger) {
	same := len(was.Instances) == len(c.Instances)
	for i := 0; same && i < len(c.Instances); i++ {
		a, b := was.Instances[i], c.Instances[i]
		a.Healthy = b.Healthy
		same = a == b
	}
	if !same {
		log.Info("simulation file changes the MIG instances of a card; restart to apply it (their health still applies)", "gpu", c.UUID)
	}
	for _, in := range c.Instances {
		if s.SetInstanceHealth(in.UUID, in.Healthy) {
			log.Info("simulated MIG instance health changed", "gpu", c.UUID, "mig", in.UUID, "healthy", in.Healthy)
		}
	}
}

func migText(m *nvidia.MIGMode) string {
	if m == nil {
		return "not supported"
	}
	return fmt.Sprintf("current %t, pending %t", m.Current, m.Pending)
}
