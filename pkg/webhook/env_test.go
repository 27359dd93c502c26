package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
)

func withEnv(c corev1.Container, names ...string) corev1.Container {
	for _, n := range names {
		c.Env = append(c.Env, corev1.EnvVar{Name: n, Value: "x"})
	}
	return c
}

func withEnvFrom(c corev1.Container, prefix, configMap string) corev1.Container {
	c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{Prefix: prefix,
		ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: configMap}}})
	return c
}

// TestValidateCreateDeviceEnv: every refused variable, in every kind of container, GPU pod or not,
// with the message the client sees.
func TestValidateCreateDeviceEnv(t *testing.T) {
	const (
		visible = "it chooses the cards the NVIDIA container runtime exposes; Cardinal's device plugin sets it to the cards it assigned"
		mps     = "it configures NVIDIA MPS (its pipe, its memory and thread limits), which Cardinal's device plugin sets for shared cards"
	)
	plain := ctr("main")
	gpu := ctr("main", "nvidia.com/gpu", "1")
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string // nil: admitted
	}{
		{"NVIDIA_VISIBLE_DEVICES on a pod without GPUs", newPod(containers(withEnv(plain, "NVIDIA_VISIBLE_DEVICES"))),
			[]string{`container "main": env NVIDIA_VISIBLE_DEVICES: ` + visible + `; remove it`}},
		{"NVIDIA_VISIBLE_DEVICES on a GPU pod", newPod(containers(withEnv(gpu, "NVIDIA_VISIBLE_DEVICES"))),
			[]string{`container "main": env NVIDIA_VISIBLE_DEVICES: ` + visible + `; remove it`}},
		{"CUDA_DEVICE_ORDER, which would move each card's limits to another card", newPod(containers(withEnv(gpu, "CUDA_DEVICE_ORDER"))),
			[]string{`container "main": env CUDA_DEVICE_ORDER: it renumbers the visible cards; Cardinal's device plugin sets PCI_BUS_ID so that each card's limits apply to that card; remove it`}},
		{"an envFrom prefix that could make CUDA_DEVICE_ORDER", newPod(containers(withEnvFrom(plain, "CUDA_DEVICE_O", "settings"))),
			[]string{`container "main": envFrom[0].prefix "CUDA_DEVICE_O" can make CUDA_DEVICE_ORDER from a key of configMap "settings", and it renumbers the visible cards; Cardinal's device plugin sets PCI_BUS_ID so that each card's limits apply to that card; use another prefix`}},
		{"MIG configuration", newPod(containers(withEnv(plain, "NVIDIA_MIG_CONFIG_DEVICES"))),
			[]string{`container "main": env NVIDIA_MIG_CONFIG_DEVICES: it grants MIG configuration or monitoring of whole cards; remove it`}},
		{"MIG monitoring", newPod(containers(withEnv(plain, "NVIDIA_MIG_MONITOR_DEVICES"))),
			[]string{`container "main": env NVIDIA_MIG_MONITOR_DEVICES: it grants MIG configuration or monitoring of whole cards; remove it`}},
		{"IMEX channels", newPod(containers(withEnv(plain, "NVIDIA_IMEX_CHANNELS"))),
			[]string{`container "main": env NVIDIA_IMEX_CHANNELS: it exposes IMEX channels (GPU memory shared across nodes); remove it`}},
		{"HAMi-core memory limits, all cards and one", newPod(containers(withEnv(gpu, "CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_0"))),
			[]string{
				`container "main": env CUDA_DEVICE_MEMORY_LIMIT: it is HAMi-core's memory limit, which Cardinal's device plugin sets from the pod's requests; remove it`,
				`container "main": env CUDA_DEVICE_MEMORY_LIMIT_0: it is HAMi-core's memory limit, which Cardinal's device plugin sets from the pod's requests; remove it`,
			}},
		{"HAMi-core compute limit", newPod(containers(withEnv(gpu, "CUDA_DEVICE_SM_LIMIT"))),
			[]string{`container "main": env CUDA_DEVICE_SM_LIMIT: it is HAMi-core's compute limit, which Cardinal's device plugin sets from the pod's requests; remove it`}},
		{"HAMi-core shared cache", newPod(containers(withEnv(gpu, "CUDA_DEVICE_MEMORY_SHARED_CACHE"))),
			[]string{`container "main": env CUDA_DEVICE_MEMORY_SHARED_CACHE: it moves HAMi-core's shared usage record, hiding the container's use from its neighbours' limits; remove it`}},
		{"HAMi-core off", newPod(containers(withEnv(gpu, "CUDA_DISABLE_CONTROL"))),
			[]string{`container "main": env CUDA_DISABLE_CONTROL: it turns HAMi-core's limits off; remove it`}},
		{"HAMi-core compute policy", newPod(containers(withEnv(gpu, "GPU_CORE_UTILIZATION_POLICY"))),
			[]string{`container "main": env GPU_CORE_UTILIZATION_POLICY: it can turn HAMi-core's compute limit off; remove it`}},
		{"HAMi-core priority", newPod(containers(withEnv(gpu, "CUDA_TASK_PRIORITY"))),
			[]string{`container "main": env CUDA_TASK_PRIORITY: it raises the container's priority over the other pods sharing its cards; remove it`}},
		{"MPS limits and pipe", newPod(containers(withEnv(gpu, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PIPE_DIRECTORY"))),
			[]string{
				`container "main": env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: ` + mps + `; remove it`,
				`container "main": env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: ` + mps + `; remove it`,
				`container "main": env CUDA_MPS_PIPE_DIRECTORY: ` + mps + `; remove it`,
			}},
		{"an init container", newPod(initContainers(withEnv(ctr("setup"), "NVIDIA_VISIBLE_DEVICES")), containers(plain)),
			[]string{`init container "setup": env NVIDIA_VISIBLE_DEVICES: ` + visible + `; remove it`}},
		{"an envFrom prefix a key could complete", newPod(containers(withEnvFrom(plain, "NVIDIA_", "settings"))),
			[]string{`container "main": envFrom[0].prefix "NVIDIA_" can make NVIDIA_VISIBLE_DEVICES from a key of configMap "settings", and ` + visible + `; use another prefix`}},
		{"an envFrom prefix inside a refused family", newPod(containers(withEnvFrom(plain, "CUDA_MPS_X_", "settings"))),
			[]string{`container "main": envFrom[0].prefix "CUDA_MPS_X_" can make CUDA_MPS_* from a key of configMap "settings", and ` + mps + `; use another prefix`}},
		// Admitted: the keys of an envFrom without a prefix are not visible at admission.
		{"envFrom without a prefix", newPod(containers(withEnvFrom(plain, "", "settings"))), nil},
		{"envFrom with an unrelated prefix", newPod(containers(withEnvFrom(plain, "APP_", "settings"))), nil},
		// Admitted: these narrow or describe, they do not widen.
		{"CUDA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, NVIDIA_REQUIRE_CUDA",
			newPod(containers(withEnv(gpu, "CUDA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "NVIDIA_REQUIRE_CUDA"))), nil},
		{"names are case-sensitive", newPod(containers(withEnv(plain, "nvidia_visible_devices"))), nil},
		{"a namespace allowed to", newPod(func(p *corev1.Pod) { p.Namespace = "gpu-operator" }, containers(withEnv(plain, "NVIDIA_VISIBLE_DEVICES"))), nil},
	}
	r := testRules()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.ValidateCreate(tt.pod, nil, tenant)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			d, ok := IsDenial(err)
			if !ok {
				t.Fatalf("error = %v, want a denial", err)
			}
			if d.Reason != ReasonDeviceEnv {
				t.Errorf("reason = %s, want %s", d.Reason, ReasonDeviceEnv)
			}
			if diff := cmp.Diff(tt.want, d.Details); diff != "" {
				t.Errorf("details (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateUpdateEphemeralContainers(t *testing.T) {
	debug := func(names ...string) podOpt {
		return func(p *corev1.Pod) {
			for _, n := range names {
				p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
					EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: n, Image: "busybox",
						Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}})
			}
		}
	}
	r := testRules()
	_, err := r.ValidateUpdate(oneGPU(), oneGPU(debug("debugger")), "alice")
	want := `ephemeral container "debugger": env NVIDIA_VISIBLE_DEVICES: it chooses the cards the NVIDIA container runtime exposes; Cardinal's device plugin sets it to the cards it assigned; remove it`
	if d, ok := IsDenial(err); !ok || d.Reason != ReasonDeviceEnv || !cmp.Equal(d.Details, []string{want}) {
		t.Errorf("kubectl debug with all the cards: %v, want %s", err, want)
	}
	// One already there (admitted before the rule) does not block other updates.
	if _, err := r.ValidateUpdate(oneGPU(debug("old")), oneGPU(debug("old"), annotated("team", "a")), "alice"); err != nil {
		t.Errorf("an update of a pod with an existing ephemeral container: %v", err)
	}
}
