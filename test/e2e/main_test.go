// Package e2e proves Cardinal end to end on the test bed: the Helm chart installed into a real
// kube-apiserver, kube-scheduler with the chart's profile and extender configuration, the webhook
// registered through the chart's MutatingWebhookConfiguration, and three real kubelets, each with
// the device-plugin binary on simulated cards (examples/simulated-gpus.yaml). Every scenario
// checks the kubelets' PodResources records, the truth of who holds which card, against the
// assignment the extender wrote.
//
// TestMain builds the three binaries from the working tree first and fails loudly if it cannot.
// Starting kubelets needs root (see package test/cluster).
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/cardinal-gpu/cardinal/test/e2e/stack"
)

// binaries is where TestMain built Cardinal's binaries; written once before any test runs.
var binaries string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	root, err := stack.Root()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: cannot find the repository root:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "cardinal-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := stack.Build(root, dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: cannot build Cardinal's binaries:", err)
		return 1
	}
	binaries = dir
	return m.Run()
}
