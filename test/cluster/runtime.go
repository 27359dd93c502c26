package cluster

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// recordingRuntime is the fake CRI with one addition: it keeps the configuration the kubelet sent
// with each CreateContainer (environment, mounts, devices, annotations), which the fake's own
// record leaves out. Tests read it with Kubelet.ContainerConfig.
type recordingRuntime struct {
	*fake.RemoteRuntime
	server *grpc.Server

	mu      sync.Mutex
	configs map[string]*runtimeapi.ContainerConfig // by namespace/pod/container, the latest
}

var _ runtimeapi.RuntimeServiceServer = (*recordingRuntime)(nil)

func newRecordingRuntime() *recordingRuntime {
	r := &recordingRuntime{RemoteRuntime: fake.NewFakeRemoteRuntime(), server: grpc.NewServer(), configs: map[string]*runtimeapi.ContainerConfig{}}
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	runtimeapi.RegisterImageServiceServer(r.server, r.RemoteRuntime)
	return r
}

// start serves the runtime on endpoint (unix://…) and marks it and its network ready.
func (r *recordingRuntime) start(endpoint string) error {
	l, err := util.CreateListener(endpoint)
	if err != nil {
		return fmt.Errorf("listen on %q: %w", endpoint, err)
	}
	go func() { _ = r.server.Serve(l) }()
	r.RuntimeService.FakeStatus = &runtimeapi.RuntimeStatus{Conditions: []*runtimeapi.RuntimeCondition{
		{Type: runtimeapi.RuntimeReady, Status: true},
		{Type: runtimeapi.NetworkReady, Status: true},
	}}
	return nil
}

func (r *recordingRuntime) stop() { r.server.Stop() }

// CreateContainer records the container's configuration, then creates it in the fake.
func (r *recordingRuntime) CreateContainer(ctx context.Context, req *runtimeapi.CreateContainerRequest) (*runtimeapi.CreateContainerResponse, error) {
	if c := req.GetConfig(); c != nil {
		key := c.GetLabels()["io.kubernetes.pod.namespace"] + "/" + c.GetLabels()["io.kubernetes.pod.name"] + "/" + c.GetMetadata().GetName()
		r.mu.Lock()
		r.configs[key] = proto.Clone(c).(*runtimeapi.ContainerConfig)
		r.mu.Unlock()
	}
	return r.RemoteRuntime.CreateContainer(ctx, req)
}

// ContainerConfig returns the configuration the kubelet last created container of pod
// namespace/name with (its environment, mounts and devices: what a real runtime would start it
// with), or nil when it created none.
func (k *Kubelet) ContainerConfig(namespace, pod, container string) *runtimeapi.ContainerConfig {
	k.recorder.mu.Lock()
	defer k.recorder.mu.Unlock()
	return k.recorder.configs[namespace+"/"+pod+"/"+container]
}
