package cluster

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// PodResources is a client of the kubelet's pod-resources API (List, GetAllocatableResources,
// Get), the node's ground truth of which CPUs and devices each container holds. Its connection
// is closed at t's cleanup; it reconnects by itself across kubelet restarts.
func (k *Kubelet) PodResources(t TB) podresourcesv1.PodResourcesListerClient {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+k.PodResourcesSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("kubelet %s: pod-resources client: %v", k.Name, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return podresourcesv1.NewPodResourcesListerClient(conn)
}
