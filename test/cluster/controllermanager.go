package cluster

import (
	"crypto/tls"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

const controllerManagerReadyTimeout = 60 * time.Second

// StartControllerManager starts kube-controller-manager running only the named controllers (for
// example "job" and "garbagecollector": Jobs get their pods, and the pods and Kueue's Workloads of a
// deleted Job go with it), with the admin kubeconfig and no leader election, and waits until it is
// healthy. The test bed runs none by default: nodes stay as the harness makes them (no node
// lifecycle controller taints them), and no controller acts on what a test did not ask for. It is
// stopped at t's cleanup.
func (c *Cluster) StartControllerManager(t TB, controllers ...string) *Process {
	t.Helper()
	if len(controllers) == 0 {
		t.Fatalf("StartControllerManager: name the controllers to run")
	}
	ports, err := freePorts(1)
	if err != nil {
		t.Fatalf("kube-controller-manager: %v", err)
	}
	port := strconv.Itoa(ports[0])
	p := c.startProcess(t, "kube-controller-manager", func() (*exec.Cmd, error) {
		return exec.Command(filepath.Join(c.bin, "kube-controller-manager"),
			"--kubeconfig="+c.Kubeconfig,
			"--authentication-kubeconfig="+c.Kubeconfig,
			"--authorization-kubeconfig="+c.Kubeconfig,
			"--authentication-skip-lookup=true",
			"--bind-address=127.0.0.1",
			"--secure-port="+port,
			"--controllers="+strings.Join(controllers, ","),
			"--leader-elect=false",
			"--use-service-account-credentials=false",
		), nil
	})
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed serving cert; only /healthz is read
	if err := c.waitHTTP(p, controllerManagerReadyTimeout, insecure, "https://127.0.0.1:"+port+"/healthz", ""); err != nil {
		t.Fatalf("%v", err)
	}
	return p
}
