package stack

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
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
	client, done, err := s.podResources(node)
	if err != nil {
		return nil, err
	}
	defer done()
	resp, err := client.GetAllocatableResources(ctx, &podresourcesapi.AllocatableResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("pod resources of %s: GetAllocatableResources: %w", node, err)
	}
	var ids []string
	for _, d := range resp.GetDevices() {
		if d.GetResourceName() == string(s.Names.GPU) {
			ids = append(ids, d.GetDeviceIds()...)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// Devices asks node's kubelet, through its PodResources API, which GPU devices each container
// holds: the truth of who has which card. Device IDs are sorted; containers without GPU devices
// are left out.
func (s *Stack) Devices(ctx context.Context, node string) (map[ContainerRef][]string, error) {
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
				if d.GetResourceName() == string(s.Names.GPU) {
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
