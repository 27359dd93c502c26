package deviceplugin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registrar is a kubelet's registration service on a kubelet.sock: it counts Register calls.
type registrar struct {
	pluginapi.UnimplementedRegistrationServer
	mu    sync.Mutex
	calls int
	srv   *grpc.Server
}

func (r *registrar) Register(context.Context, *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	return &pluginapi.Empty{}, nil
}

func (r *registrar) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// startKubelet serves a registration service on dir/kubelet.sock, as a (re)starting kubelet does.
func startKubelet(t *testing.T, dir string) *registrar {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(dir, "kubelet.sock"))
	if err != nil {
		t.Fatal(err)
	}
	r := &registrar{srv: grpc.NewServer()}
	pluginapi.RegisterRegistrationServer(r.srv, r)
	go func() { _ = r.srv.Serve(l) }()
	t.Cleanup(r.srv.Stop)
	return r
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A kubelet restart wipes the device-plugin folder (our socket goes) and creates a new kubelet.sock.
// The plugin must register with the new kubelet exactly once: a second registration makes the kubelet
// drop the ListAndWatch stream it opened for the first, which left the resource at 0 in the e2e suite.
func TestKubeletRestartRegistersOnce(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp") // short: unix socket paths are limited to 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	first := startKubelet(t, dir)
	link := &kubeletLink{plugin: testPlugin(t, testCards(2, nil), 1), dir: dir, socket: socketName("nvidia.com/gpu"),
		resource: "nvidia.com/gpu", log: logr.Discard()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- link.run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	})
	waitFor(t, "the first registration", func() bool { return first.count() == 1 && link.registered.Load() })

	// The kubelet restarts: it stops, wipes the folder, and serves a new kubelet.sock.
	first.srv.Stop()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	second := startKubelet(t, dir)
	waitFor(t, "a registration with the new kubelet", func() bool { return second.count() >= 1 })
	// Both events (socket removed, kubelet.sock created) have been seen well within this time.
	time.Sleep(500 * time.Millisecond)
	if n := second.count(); n != 1 {
		t.Errorf("registered %d times with the restarted kubelet, want 1", n)
	}
	if _, err := os.Stat(filepath.Join(dir, link.socket)); err != nil {
		t.Errorf("plugin socket after the restart: %v", err)
	}
}
