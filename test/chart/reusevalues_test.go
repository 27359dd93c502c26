package chart

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// TestDevicePluginWithoutKubeletConfigValues: `helm upgrade --reuse-values` from a release made
// before devicePlugin.kubeletConfig existed renders with no kubeletConfig map at all (null here
// removes it, as the old release's values lack it); the DaemonSet renders without the file and flag.
func TestDevicePluginWithoutKubeletConfigValues(t *testing.T) {
	r := render(t, map[string]any{"devicePlugin": map[string]any{"kubeletConfig": nil}})
	spec := get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec
	flags := flagsOf(t, container(t, spec, "device-plugin").Args)
	for _, name := range []string{"kubelet-config", "kubelet-poll-interval"} {
		if v, ok := flags[name]; ok {
			t.Errorf("--%s=%s rendered without devicePlugin.kubeletConfig", name, v)
		}
	}
	for _, v := range spec.Volumes {
		if v.Name == "kubelet-config" {
			t.Errorf("volume kubelet-config rendered without devicePlugin.kubeletConfig")
		}
	}
}
