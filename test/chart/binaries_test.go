package chart

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestBinariesAcceptChartArguments runs each real binary with the arguments the chart renders for it,
// then --help: pflag parses everything before --help, so an unknown or malformed flag fails the run,
// and --help ends it before it starts serving.
func TestBinariesAcceptChartArguments(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "../../cmd/scheduler-extender", "../../cmd/webhook", "../../cmd/device-plugin")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the binaries: %v\n%s", err, out)
	}
	r := render(t, map[string]any{
		"devicePlugin": simulated,
		"scheduler":    map[string]any{"extender": map[string]any{"nodePolicy": "spread", "gpuPolicy": "spread"}},
	})
	runs := map[string]corev1.Container{
		"scheduler-extender": container(t, get[*appsv1.Deployment](t, r, schedulerName).Spec.Template.Spec, "extender"),
		"webhook":            container(t, get[*appsv1.Deployment](t, r, webhookName).Spec.Template.Spec, "webhook"),
		"device-plugin":      container(t, get[*appsv1.DaemonSet](t, r, devicePluginName).Spec.Template.Spec, "device-plugin"),
	}
	for name, c := range runs {
		t.Run(name, func(t *testing.T) {
			run := func(args ...string) (string, error) {
				out, err := exec.Command(filepath.Join(bin, name), args...).CombinedOutput()
				return string(out), err
			}
			if out, err := run(append(append([]string(nil), c.Args...), "--help")...); err != nil {
				t.Errorf("%s %s --help: %v\n%s", name, strings.Join(c.Args, " "), err, out)
			}
			// The check itself: a flag the binary does not know must fail the same way.
			if out, err := run(append(append([]string(nil), c.Args...), "--no-such-flag=1", "--help")...); err == nil {
				t.Errorf("%s accepted --no-such-flag; this test could not catch a wrong flag\n%s", name, out)
			}
		})
	}
}
