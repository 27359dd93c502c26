package webhook

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

func inventoryNode(t *testing.T, name string, gpus []annotations.GPU) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"big": "label"}}}
	if gpus != nil {
		v, err := annotations.EncodeInventory(annotations.Inventory{GPUs: gpus})
		if err != nil {
			t.Fatal(err)
		}
		n.Annotations = map[string]string{annotations.GPUInventory: v}
	}
	return n
}

// TestNodeWatcher follows nodes through a fake clientset: added, changed, broken, removed.
func TestNodeWatcher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(inventoryNode(t, "a", cardsOf("a", "NVIDIA A100", 81920, 8)), inventoryNode(t, "plain", nil))
	w, err := NewNodeWatcher(client, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	nodes := client.CoreV1().Nodes()

	// waitFor polls the watcher's view until it shows the wanted counts (informers are asynchronous).
	waitFor := func(what string, nodesWant, cardsWant int) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			c := w.Cards()
			return w.HasSynced() && c.Nodes() == nodesWant && c.Total() == cardsWant, nil
		})
		if err != nil {
			c := w.Cards()
			t.Fatalf("%s: view has %d nodes and %d cards, want %d and %d", what, c.Nodes(), c.Total(), nodesWant, cardsWant)
		}
	}
	waitFor("initial list", 1, 8)

	if _, err := nodes.Create(ctx, inventoryNode(t, "c", cardsOf("c", "Tesla T4", 15360, 3)), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node c added", 2, 8+3)

	broken := inventoryNode(t, "c", nil)
	broken.Annotations = map[string]string{annotations.GPUInventory: `{"v":9}`}
	if _, err := nodes.Update(ctx, broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node c with an inventory of an unknown version is ignored", 1, 8)

	if err := nodes.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("node a removed", 0, 0)
	if w.Cards().Known() {
		t.Errorf("view knows cards after every node is gone")
	}
}

func TestSlimNode(t *testing.T) {
	n := inventoryNode(t, "a", cardsOf("a", "T4", 15360, 1))
	n.Status.Capacity = corev1.ResourceList{"cpu": res("cpu", "8")["cpu"]}
	got, err := slimNode(n)
	if err != nil {
		t.Fatal(err)
	}
	s := got.(*corev1.Node)
	if s.Name != "a" || len(s.Labels) != 0 || len(s.Status.Capacity) != 0 || s.Annotations[annotations.GPUInventory] != n.Annotations[annotations.GPUInventory] {
		t.Errorf("slim node = %+v, want only the name and the inventory", s)
	}
}
