package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/cli"
)

// testKubectlCardinal runs kubectl cardinal's commands on the stack and checks them against the
// truth: cards names the containers the kubelet's PodResources and the assignments say hold each
// card, nodes counts them, and explain sends a T4 pod to the only T4 node.
func testKubectlCardinal(t *testing.T, e *env) {
	h100 := map[string]string{annotations.UseGPUType: "H100"}
	e.create(t,
		pod("k-whole", map[string]string{annotations.UseGPUType: "A100"}),
		pod("k-shared", h100, ctr("main", gpu{cards: 1, memMiB: 20000, cores: 30})))
	e.waitRunning(t, "k-whole", "k-shared")
	truth := e.truth(t, "k-whole", "k-shared")

	output := cli.OutputJSON
	run := func(args ...string) []byte {
		t.Helper()
		var out, errOut bytes.Buffer
		o := cli.Options{Client: e.client, Namespace: namespace, Names: annotations.DefaultResourceNames(),
			SchedulerName: "cardinal-scheduler", Output: output, Out: &out}
		var err error
		switch args[0] {
		case "nodes":
			err = o.Nodes(ctx(t))
		case "cards":
			err = o.Cards(ctx(t), args[1])
		case "explain":
			err = o.Explain(ctx(t), cli.ExplainOptions{File: args[1], NodePolicy: annotations.PolicyBinpack, GPUPolicy: annotations.PolicyBinpack})
		}
		if err != nil {
			t.Fatalf("kubectl cardinal %v: %v %s", args, err, errOut.String())
		}
		return out.Bytes()
	}

	for key, h := range truth {
		var cards []cli.CardInfo
		if err := json.Unmarshal(run("cards", h.Node), &cards); err != nil {
			t.Fatal(err)
		}
		podName, container, _ := strings.Cut(key, "/")
		for _, id := range h.IDs {
			uuid, _, err := annotations.ParseDeviceID(id)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range cards {
				for _, hd := range c.Holders {
					if c.UUID == uuid && hd.Pod == namespace+"/"+podName && hd.Container == container && hd.Device == id {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("cards %s: no holder %s/%s of %s (PodResources has it), got %+v", h.Node, podName, container, id, cards)
			}
		}
	}

	var nodes []cli.NodeSummary
	if err := json.Unmarshal(run("nodes"), &nodes); err != nil {
		t.Fatal(err)
	}
	wholeNode := truth["k-whole/main"].Node
	for _, n := range nodes {
		if n.Name != wholeNode {
			continue
		}
		want := len(healthy(e.NodeCards(wholeNode))) - 1
		if n.FreeWhole != want {
			t.Errorf("nodes: %s has %d free cards, want %d (k-whole holds one): %+v", wholeNode, n.FreeWhole, want, n)
		}
	}

	t4 := pod("k-explain", map[string]string{annotations.UseGPUType: "T4"})
	t4.APIVersion, t4.Kind = "v1", "Pod"
	raw, err := json.Marshal(t4)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "pod.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	var x cli.Explanation
	if err := json.Unmarshal(run("explain", path), &x); err != nil {
		t.Fatal(err)
	}
	if x.Node != nodeC {
		t.Errorf("explain: %+v, want %s (the only T4s)", x, nodeC)
	}
	for _, n := range x.Nodes {
		if n.Name != nodeC && (n.Fits || !strings.Contains(n.Reason, "t4")) {
			t.Errorf("explain: %s: %+v, want a reason naming use-gputype=t4", n.Name, n)
		}
	}

	// The tables, for a person reading the log (go test -v).
	output = cli.OutputTable
	t.Logf("kubectl cardinal nodes:\n%s", run("nodes"))
	t.Logf("kubectl cardinal cards %s:\n%s", wholeNode, run("cards", wholeNode))
	t.Logf("kubectl cardinal explain -f pod.json:\n%s", run("explain", path))
}
