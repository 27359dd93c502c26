package cluster

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

const schedulerReadyTimeout = 60 * time.Second

// defaultSchedulerConfig is used when StartScheduler gets no configuration.
const defaultSchedulerConfig = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"

// SchedulerVerbosityEnv, when set, is kube-scheduler's --v (its queue's decisions log at 5), for a
// failure whose cause is in kube-scheduler; with KeepLogsEnv the whole log outlives the test.
const SchedulerVerbosityEnv = "CARDINAL_TESTBED_SCHEDULER_V"

// StartScheduler starts kube-scheduler with config, a KubeSchedulerConfiguration in YAML (nil: the
// default profile only), and waits until it is ready. The harness sets
// clientConnection.kubeconfig to the admin kubeconfig and, unless config sets leaderElection,
// turns leader election off so a restarted scheduler schedules at once. The process is
// c.Scheduler; it is stopped at t's cleanup.
func (c *Cluster) StartScheduler(t TB, config []byte) *Process {
	t.Helper()
	if c.Scheduler != nil {
		t.Fatalf("kube-scheduler is already running (%s)", c.Scheduler.LogPath)
	}
	if config == nil {
		config = []byte(defaultSchedulerConfig)
	}
	config, err := completeSchedulerConfig(config, c.Kubeconfig)
	if err != nil {
		t.Fatalf("kube-scheduler config: %v", err)
	}
	configPath := c.path("kube-scheduler.yaml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatalf("kube-scheduler config: %v", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatalf("kube-scheduler: %v", err)
	}
	port := strconv.Itoa(ports[0])
	args := []string{
		"--config=" + configPath,
		"--bind-address=127.0.0.1",
		"--secure-port=" + port,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--authentication-skip-lookup=true",
	}
	if v := os.Getenv(SchedulerVerbosityEnv); v != "" {
		if _, err := strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: want a number (kube-scheduler's --v)", SchedulerVerbosityEnv, v)
		}
		args = append(args, "--v="+v)
	}
	p := c.startProcess(t, "kube-scheduler", func() (*exec.Cmd, error) {
		return exec.Command(filepath.Join(c.bin, "kube-scheduler"), args...), nil
	})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving cert; only /readyz is read
	if err := c.waitHTTP(p, schedulerReadyTimeout, insecure, "https://127.0.0.1:"+port+"/readyz", ""); err != nil {
		t.Fatalf("%v", err)
	}
	c.Scheduler = p
	return p
}

// completeSchedulerConfig fills in the parts of a KubeSchedulerConfiguration the harness owns.
func completeSchedulerConfig(config []byte, kubeconfig string) ([]byte, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("parse KubeSchedulerConfiguration: %w", err)
	}
	if doc == nil {
		doc = map[string]any{}
	}
	cc, _ := doc["clientConnection"].(map[string]any)
	if cc == nil {
		cc = map[string]any{}
	}
	cc["kubeconfig"] = kubeconfig
	doc["clientConnection"] = cc
	if _, ok := doc["leaderElection"]; !ok {
		doc["leaderElection"] = map[string]any{"leaderElect": false}
	}
	return yaml.Marshal(doc)
}
