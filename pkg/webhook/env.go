package webhook

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// deviceVar is an environment variable (or, with prefix, a family of them) that decides which cards
// a container sees or how much of them it may use. Cardinal's device plugin sets what the node's
// runtime needs from the assignment (Allocate); a pod that sets one itself could escape its cards or
// its limits, so the webhook refuses it.
type deviceVar struct {
	name   string
	prefix bool
	why    string
}

// deviceVars is the refused list. Deliberately not in it: CUDA_VISIBLE_DEVICES (it can only narrow
// the devices the container already has: the runtime exposes only the assigned /dev/nvidia*),
// NVIDIA_DRIVER_CAPABILITIES and NVIDIA_REQUIRE_* (which driver libraries are mounted and which
// driver versions are required: no other card, no more of one; video and graphics workloads need
// the former), LD_PRELOAD (HAMi-core is loaded through /etc/ld.so.preload, which the environment
// cannot undo).
var deviceVars = []deviceVar{
	{name: "NVIDIA_VISIBLE_DEVICES", why: "it chooses the cards the NVIDIA container runtime exposes; Cardinal's device plugin sets it to the cards it assigned"},
	{name: "CUDA_DEVICE_ORDER", why: "it renumbers the visible cards; Cardinal's device plugin sets PCI_BUS_ID so that each card's limits apply to that card"},
	{name: "NVIDIA_MIG_", prefix: true, why: "it grants MIG configuration or monitoring of whole cards"},
	{name: "NVIDIA_IMEX_CHANNELS", why: "it exposes IMEX channels (GPU memory shared across nodes)"},
	{name: "CUDA_DEVICE_MEMORY_LIMIT", prefix: true, why: "it is HAMi-core's memory limit, which Cardinal's device plugin sets from the pod's requests"},
	{name: "CUDA_DEVICE_SM_LIMIT", prefix: true, why: "it is HAMi-core's compute limit, which Cardinal's device plugin sets from the pod's requests"},
	{name: "CUDA_DEVICE_MEMORY_SHARED_CACHE", why: "it moves HAMi-core's shared usage record, hiding the container's use from its neighbours' limits"},
	{name: "CUDA_DISABLE_CONTROL", why: "it turns HAMi-core's limits off"},
	{name: "GPU_CORE_UTILIZATION_POLICY", why: "it can turn HAMi-core's compute limit off"},
	{name: "CUDA_TASK_PRIORITY", why: "it raises the container's priority over the other pods sharing its cards"},
	{name: "CUDA_MPS_", prefix: true, why: "it configures NVIDIA MPS (its pipe, its memory and thread limits), which Cardinal's device plugin sets for shared cards"},
}

// DefaultDeviceEnvNamespaces may set device variables by default: the NVIDIA GPU operator's
// namespace, whose device plugin, DCGM exporter and validators set NVIDIA_VISIBLE_DEVICES=all.
func DefaultDeviceEnvNamespaces() []string { return []string{"gpu-operator"} }

// display is the name, with a trailing "*" for a prefix.
func (v deviceVar) display() string {
	if v.prefix {
		return v.name + "*"
	}
	return v.name
}

// DeviceEnvNames lists the refused variables, a trailing "*" marking a prefix (for docs and flags).
func DeviceEnvNames() []string {
	out := make([]string, len(deviceVars))
	for i, v := range deviceVars {
		out[i] = v.display()
	}
	return out
}

func deviceEnvNames() []string    { return deviceVarNames(false) }
func deviceEnvPrefixes() []string { return deviceVarNames(true) }

func deviceVarNames(prefix bool) []string {
	var out []string
	for _, v := range deviceVars {
		if v.prefix == prefix {
			out = append(out, v.name)
		}
	}
	return out
}

// refusedVar returns the entry that refuses the variable name, if any (names are case-sensitive).
func refusedVar(name string) (deviceVar, bool) {
	for _, v := range deviceVars {
		if name == v.name || (v.prefix && strings.HasPrefix(name, v.name)) {
			return v, true
		}
	}
	return deviceVar{}, false
}

// completableVar returns an entry that some key could complete into a refused name behind the
// envFrom prefix p: the keys of a ConfigMap or Secret are not visible at admission, the prefix is.
func completableVar(p string) (deviceVar, bool) {
	if p == "" {
		return deviceVar{}, false
	}
	for _, v := range deviceVars {
		if strings.HasPrefix(v.name, p) || (v.prefix && strings.HasPrefix(p, v.name)) {
			return v, true
		}
	}
	return deviceVar{}, false
}

// deviceEnvRefusals lists, for every container of spec (init and ephemeral included, in that
// order), each device variable it sets in env, and each envFrom prefix that could make one. What an
// envFrom without a prefix brings is not visible: the keys live in a ConfigMap or Secret the
// webhook does not read (and that may change after admission).
func deviceEnvRefusals(spec *corev1.PodSpec) []error {
	var out []error
	check := func(kind, name string, env []corev1.EnvVar, from []corev1.EnvFromSource) {
		for _, e := range env {
			if v, ok := refusedVar(e.Name); ok {
				out = append(out, fmt.Errorf("%s %q: env %s: %s; remove it", kind, name, e.Name, v.why))
			}
		}
		for i, f := range from {
			if v, ok := completableVar(f.Prefix); ok {
				out = append(out, fmt.Errorf("%s %q: envFrom[%d].prefix %q can make %s from a key of %s, and %s; use another prefix",
					kind, name, i, f.Prefix, v.display(), envSource(f), v.why))
			}
		}
	}
	for i := range spec.InitContainers {
		c := &spec.InitContainers[i]
		check("init container", c.Name, c.Env, c.EnvFrom)
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		check("container", c.Name, c.Env, c.EnvFrom)
	}
	for i := range spec.EphemeralContainers {
		c := &spec.EphemeralContainers[i]
		check("ephemeral container", c.Name, c.Env, c.EnvFrom)
	}
	return out
}

func envSource(f corev1.EnvFromSource) string {
	switch {
	case f.ConfigMapRef != nil:
		return fmt.Sprintf("configMap %q", f.ConfigMapRef.Name)
	case f.SecretRef != nil:
		return fmt.Sprintf("secret %q", f.SecretRef.Name)
	}
	return "its source"
}

// deviceEnvAllowed reports whether pods of namespace ns may set device variables.
func (r *Rules) deviceEnvAllowed(ns string) bool { return slices.Contains(r.DeviceEnvNamespaces, ns) }
