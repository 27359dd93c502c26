package stack

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

// registrationsMetric counts the plugin's successful registrations with the kubelet.
const registrationsMetric = "cardinal_device_plugin_registrations_total"

// RestartPlugin restarts node's device plugin and waits until it has registered with the kubelet
// again and the kubelet can hand out its cards.
func (s *Stack) RestartPlugin(t cluster.TB, node string) {
	t.Helper()
	s.Plugins[node].Restart(t)
	s.waitRegistrations(t, node, 1) // a new process counts from 0
	s.WaitAdvertised(t, node)
}

// RestartKubelet restarts node's kubelet and waits until the plugin has registered with the new
// kubelet and the kubelet can hand out its cards.
func (s *Stack) RestartKubelet(t cluster.TB, node string) {
	t.Helper()
	before, err := s.registrations(node)
	if err != nil {
		t.Fatalf("%v", err)
	}
	s.Kubelets[node].Restart(t)
	s.waitRegistrations(t, node, before+1)
	s.WaitAdvertised(t, node)
}

func (s *Stack) waitRegistrations(t cluster.TB, node string, atLeast int) {
	t.Helper()
	Wait(t, readyTimeout, fmt.Sprintf("device plugin on %s registered (%d registrations)", node, atLeast), func() (bool, string, error) {
		if exited, err := s.Plugins[node].Exited(); exited {
			return false, "", fmt.Errorf("device plugin on %s exited (%s):\n%s", node, fmt.Sprint(err), s.Plugins[node].Tail(30))
		}
		n, err := s.registrations(node)
		if err != nil {
			return false, err.Error(), nil //nolint:nilerr // polling: an error means not ready yet
		}
		return n >= atLeast, fmt.Sprintf("%d registrations", n), nil
	})
}

// registrations reads the plugin's registration counter (summed over its labels).
func (s *Stack) registrations(node string) (int, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(s.pluginMetrics[node])
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	total := 0.0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, registrationsMetric) {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %q: %w", s.pluginMetrics[node], line, err)
		}
		total += v
	}
	return int(total), sc.Err()
}
