package sim

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cardinal-gpu/cardinal/bench/replay/trace"
	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// PodObject renders a trace pod as the Pod a user would create for Cardinal: one container named
// "main" whose limits ask for num_gpu cards of the nvidia.com/gpu resource; a fractional pod also asks
// for gpu_milli/10 percent of the card's memory (nvidia.com/gpumem-percentage) and compute
// (nvidia.com/gpucores), rounded up to a whole percent (the shared traces only use multiples of 10
// milli, so nothing is rounded there); gpu_spec becomes nvidia.com/use-gputype.
func PodObject(p *trace.Pod, names annotations.ResourceNames) *corev1.Pod {
	limits := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(p.CPUMilli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(p.MemoryMiB<<20, resource.BinarySI),
	}
	if p.NumGPU > 0 {
		limits[names.GPU] = *resource.NewQuantity(int64(p.NumGPU), resource.DecimalSI)
	}
	if p.Fractional() {
		pct := (p.GPUMilli + 9) / 10
		limits[names.MemPercentage] = *resource.NewQuantity(pct, resource.DecimalSI)
		limits[names.Cores] = *resource.NewQuantity(pct, resource.DecimalSI)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Limits: limits}}}},
	}
	if len(p.GPUSpec) > 0 {
		pod.Annotations = map[string]string{annotations.UseGPUType: strings.Join(p.GPUSpec, ",")}
	}
	return pod
}

// podSpec is a trace pod ready for the replay: its GPU request and selector as the extender parses
// them from the Pod, and its CPU and memory for the kube-scheduler side of the fit.
type podSpec struct {
	row      *trace.Pod
	request  annotations.PodRequest
	selector annotations.Selector
	// gpuMilli is the pod's GPU request in thousandths of a card (0 for CPU-only pods).
	gpuMilli int64
}

// preparePods parses every trace pod the way the extender does.
func preparePods(pods []trace.Pod) ([]podSpec, error) {
	names := annotations.DefaultResourceNames()
	out := make([]podSpec, len(pods))
	for i := range pods {
		obj := PodObject(&pods[i], names)
		req, err := annotations.ParsePodRequest(obj, names)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", pods[i].Name, err)
		}
		sel, err := annotations.ParseSelector(obj.Annotations)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", pods[i].Name, err)
		}
		out[i] = podSpec{row: &pods[i], request: req, selector: sel, gpuMilli: pods[i].GPUMilliTotal()}
	}
	return out, nil
}
