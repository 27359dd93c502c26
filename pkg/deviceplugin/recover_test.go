package deviceplugin

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func TestPanicInAHandlerFailsOnlyThatCall(t *testing.T) {
	p := testPlugin(t, testCards(4, nil), 1)
	sock := filepath.Join(t.TempDir(), "p.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(recoveryOptions(logrDiscard())...)
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	c := pluginapi.NewDevicePluginClient(conn)
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{uuidOf(0)}}}}

	// A panic while the plugin's lock is held (here: its device table gone).
	table := p.table
	p.mu.Lock()
	p.table = nil
	p.mu.Unlock()
	_, err = c.Allocate(context.Background(), req)
	if status.Code(err) != codes.Internal {
		t.Fatalf("Allocate with a panicking handler: %v, want Internal", err)
	}
	p.mu.Lock()
	p.table = table
	p.mu.Unlock()

	// A panic after it (in the refusal hook).
	p.failed = func(*AllocateError) { panic("hook") }
	_, err = c.Allocate(context.Background(), req)
	if status.Code(err) != codes.Internal {
		t.Fatalf("Allocate with a panicking hook: %v, want Internal", err)
	}
	// The process, the server and the lock survived: the next call is answered.
	p.failed = func(*AllocateError) {}
	p.UpsertPod(newPod("a", ctr{name: "main", ids: []string{uuidOf(0)}}).obj(t))
	if _, err := c.Allocate(context.Background(), req); err != nil {
		t.Fatalf("Allocate after the panics: %v", err)
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("ListAndWatch after the panics: %v", err)
	}
}
