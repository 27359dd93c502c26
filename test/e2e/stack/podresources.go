package stack

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// ContainerRef names one container of one pod.
type ContainerRef struct {
	Namespace, Pod, Container string
}

func (r ContainerRef) String() string { return r.Namespace + "/" + r.Pod + "/" + r.Container }

// client dials node's PodResources socket.
func (s *Stack) podResources(node string) (podresourcesapi.PodResourcesListerClient, func(), error) {
	k, ok := s.Kubelets[node]
	if !ok {
		return nil, nil, fmt.Errorf("no kubelet %s", node)
	}
	conn, err := grpc.NewClient("unix://"+k.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("pod resources of %s: %w", node, err)
	}
	return podresourcesapi.NewPodResourcesListerClient(conn), func() { _ = conn.Close() }, nil
}

// Allocatable returns the GPU device IDs node's kubelet can hand out now (its device manager's
// healthy devices, allocated or not), sorted.
func (s *Stack) Allocatable(ctx context.Context, node string) ([]string, error) {
	byResource, err := s.allocatable(ctx, node)
	if err != nil {
		return nil, err
	}
	return byResource[string(s.Names.GPU)], nil
}

// MIGAllocatable returns, per MIG resource (nvidia.com/mig-<profile>), the device IDs (MIG UUIDs)
// node's kubelet can hand out now, sorted.
func (s *Stack) MIGAllocatable(ctx context.Context, node string) (map[string][]string, error) {
	byResource, err := s.allocatable(ctx, node)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for name, ids := range byResource {
		if s.Names.IsMIGResource(corev1.ResourceName(name)) {
			out[name] = ids
		}
	}
	return out, nil
}

// allocatable is the kubelet's allocatable device IDs by resource name, sorted.
func (s *Stack) allocatable(ctx context.Context, node string) (map[string][]string, error) {
	client, done, err := s.podResources(node)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources of %s: GetAllocatableResources: %w", node, err)
	}
	out := map[string][]string{}
	for _, d := range resp.GetDevices() {
		out[d.GetResourceName()] = append(out[d.GetResourceName()], d.GetDeviceIds()...)
	}
	for _, ids := range out {
		slices.Sort(ids)
	}
	return out, nil
}

// Devices asks node's kubelet, through its PodResources API, which GPU devices each container
// holds: the truth of who has which card. Device IDs are sorted; containers without GPU devices
// are left out.
func (s *Stack) Devices(ctx context.Context, node string) (map[ContainerRef][]string, error) {
	return s.devices(ctx, node, func(name string) bool { return name == string(s.Names.GPU) })
}

// MIGDevices is Devices for the MIG resources: the MIG UUIDs each container holds, of any profile.
func (s *Stack) MIGDevices(ctx context.Context, node string) (map[ContainerRef][]string, error) {
	return s.devices(ctx, node, func(name string) bool { return s.Names.IsMIGResource(corev1.ResourceName(name)) })
}

// devices is the device IDs each container holds of the resources keep accepts.
func (s *Stack) devices(ctx context.Context, node string, keep func(resource string) bool) (map[ContainerRef][]string, error) {
	client, done, err := s.podResources(node)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := client.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources of %s: List: %w", node, err)
	}
	out := map[ContainerRef][]string{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			var ids []string
			for _, d := range c.GetDevices() {
				if keep(d.GetResourceName()) {
					ids = append(ids, d.GetDeviceIds()...)
				}
			}
			if len(ids) > 0 {
				slices.Sort(ids)
				out[ContainerRef{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}] = ids
			}
		}
	}
	return out, nil
}
