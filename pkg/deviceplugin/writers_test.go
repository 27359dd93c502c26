package deviceplugin

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func TestInventoryRestoredAfterDriftWithoutSteadyStateWrites(t *testing.T) {
	p := testPlugin(t, testCards(2, nil), 1)
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}})
	// seen is the annotation as the node informer shows it.
	seen := ""
	w := newInventoryWriter(p, client, testNode, func() (string, bool) { return seen, true }, logrDiscard())
	want, err := annotations.EncodeInventory(p.Inventory())
	if err != nil {
		t.Fatal(err)
	}
	patches := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "patch" {
				n++
			}
		}
		return n
	}
	sync := func() {
		t.Helper()
		if err := w.sync(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	sync() // first publication
	seen = want
	for i := 0; i < 3; i++ {
		sync() // Node updates that do not touch the annotation (kubelet status, labels)
	}
	if n := patches(); n != 1 {
		t.Fatalf("%d patches after the first publication and 3 unrelated Node updates, want 1", n)
	}
	seen = "" // someone removes the annotation; the informer delivers that update
	sync()
	if n := patches(); n != 2 {
		t.Fatalf("removed annotation: %d patches, want 2 (rewritten on the update that removed it)", n)
	}
	seen = want
	sync()
	seen = `{"v":1,"gpus":[]}` // someone edits it
	sync()
	if n := patches(); n != 3 {
		t.Fatalf("edited annotation: %d patches, want 3", n)
	}
	node, err := client.CoreV1().Nodes().Get(context.Background(), testNode, metav1.GetOptions{})
	if err != nil || node.Annotations[annotations.GPUInventory] != want {
		t.Fatalf("node annotation %q, %v; want the inventory", node.Annotations[annotations.GPUInventory], err)
	}
}
