package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// pluginEnv, when set in the environment of the test binary, makes it a device plugin for the
// resource it names, serving in /var/lib/kubelet/device-plugins: StartInNamespace runs it there.
const pluginEnv = "CARDINAL_TESTBED_PLUGIN"

// pluginDevices is how many devices every test plugin advertises.
const pluginDevices = 2

func TestMain(m *testing.M) {
	if resource := os.Getenv(pluginEnv); resource != "" {
		os.Exit(runPluginCommand(resource))
	}
	os.Exit(m.Run())
}

// runPluginCommand serves resource from the kubelet's own device-plugin folder until SIGTERM.
func runPluginCommand(resource string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	p := &fakeDevicePlugin{resource: resource}
	if err := p.serve(ctx, v1beta1.DevicePluginPath); err != nil {
		fmt.Fprintln(os.Stderr, "device plugin:", err)
		return 1
	}
	fmt.Println("device plugin registered", resource)
	<-ctx.Done()
	return 0
}

// fakeDevicePlugin is the smallest device plugin the kubelet accepts: pluginDevices healthy
// devices (or one per entry of numa), allocations answered with one environment variable.
type fakeDevicePlugin struct {
	v1beta1.UnimplementedDevicePluginServer
	resource string
	// numa, when set, is the NUMA node of each device, reported in its TopologyInfo: device
	// "dev-<i>" sits on numa[i].
	numa      []int64
	allocated atomic.Int32 // container allocations answered
}

var _ v1beta1.DevicePluginServer = (*fakeDevicePlugin)(nil)

// serve listens in dir, registers at dir/kubelet.sock and serves until ctx ends.
func (p *fakeDevicePlugin) serve(ctx context.Context, dir string) error {
	endpoint := fmt.Sprintf("testbed-%d-%d.sock", os.Getpid(), time.Now().UnixNano())
	sock := filepath.Join(dir, endpoint)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	v1beta1.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		srv.Stop()
		_ = os.Remove(sock)
	}()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = v1beta1.NewRegistrationClient(conn).Register(rctx, &v1beta1.RegisterRequest{
		Version:      v1beta1.Version,
		Endpoint:     endpoint,
		ResourceName: p.resource,
	})
	if err != nil {
		return fmt.Errorf("register %s: %w", p.resource, err)
	}
	return nil
}

func (p *fakeDevicePlugin) GetDevicePluginOptions(context.Context, *v1beta1.Empty) (*v1beta1.DevicePluginOptions, error) {
	return &v1beta1.DevicePluginOptions{}, nil
}

func (p *fakeDevicePlugin) ListAndWatch(_ *v1beta1.Empty, stream grpc.ServerStreamingServer[v1beta1.ListAndWatchResponse]) error {
	n := pluginDevices
	if len(p.numa) > 0 {
		n = len(p.numa)
	}
	devices := make([]*v1beta1.Device, n)
	for i := range devices {
		devices[i] = &v1beta1.Device{ID: "dev-" + strconv.Itoa(i), Health: v1beta1.Healthy}
		if len(p.numa) > 0 {
			devices[i].Topology = &v1beta1.TopologyInfo{Nodes: []*v1beta1.NUMANode{{ID: p.numa[i]}}}
		}
	}
	if err := stream.Send(&v1beta1.ListAndWatchResponse{Devices: devices}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (p *fakeDevicePlugin) Allocate(_ context.Context, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	resp := &v1beta1.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		p.allocated.Add(1)
		resp.ContainerResponses = append(resp.ContainerResponses, &v1beta1.ContainerAllocateResponse{
			Envs: map[string]string{"TESTBED_DEVICES": fmt.Sprint(cr.DevicesIds)},
		})
	}
	return resp, nil
}

func (p *fakeDevicePlugin) PreStartContainer(context.Context, *v1beta1.PreStartContainerRequest) (*v1beta1.PreStartContainerResponse, error) {
	return &v1beta1.PreStartContainerResponse{}, nil
}
