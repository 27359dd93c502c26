package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

func TestParseTolerations(t *testing.T) {
	gpuTaint := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, tc := range []struct {
		in      string
		want    []corev1.Toleration
		errHas  string
		wantErr bool
	}{
		{in: "", want: nil},
		{in: `[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]`, want: []corev1.Toleration{gpuTaint}},
		{in: `[{"key":"dedicated","operator":"Equal","value":"gpu","effect":"NoExecute","tolerationSeconds":30}]`,
			want: []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](30)}}},
		{in: `{"key":"x"}`, errHas: "not a JSON list of tolerations"},
		{in: `[{"key":"x","operator":"Exists","colour":"red"}]`, errHas: `unknown field "colour"`},
		{in: `[{"key":"nvidia.com/gpu","operator":"Exists","value":"present"}]`, errHas: `[0]: value "present": must be empty with operator Exists`},
		{in: `[{"key":"a"},{"key":"b","operator":"Maybe"}]`, errHas: `[1]: operator "Maybe": not Exists or Equal`},
		{in: `[{"key":"a b","operator":"Exists"}]`, errHas: `[0]: key "a b"`},
		{in: `[{"operator":"Equal","value":"x"}]`, errHas: `an empty key needs operator Exists`},
		{in: `[{"key":"a","operator":"Exists","effect":"NoWay"}]`, errHas: `effect "NoWay"`},
		{in: `[{"key":"a","operator":"Exists","effect":"NoSchedule","tolerationSeconds":5}]`, errHas: `tolerationSeconds: only with effect NoExecute`},
	} {
		got, err := ParseTolerations(tc.in)
		if tc.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.errHas)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", tc.in, diff)
		}
	}
}

// TestDefaultAddsGPUTolerations: every GPU pod Cardinal places gets the tolerations, whatever it
// asks for (a share or MIG instances, which ExtendedResourceToleration would tolerate under other
// keys), once; CPU-only pods and other schedulers' pods do not.
func TestDefaultAddsGPUTolerations(t *testing.T) {
	tol := corev1.Toleration{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	r := testRules()
	r.GPUTolerations = []corev1.Toleration{tol}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"whole card", oneGPU(), true},
		{"a share", newPod(containers(ctr("main", "nvidia.com/gpumem", "1024"))), true},
		{"MIG instances", newPod(containers(ctr("main", "nvidia.com/mig-1g.10gb", "1"))), true},
		{"CPU-only", newPod(containers(ctr("main"))), false},
		{"another scheduler's", oneGPU(scheduler("volcano")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod.DeepCopy()
			r.Default(pod)
			var want []corev1.Toleration
			if tc.want {
				want = []corev1.Toleration{tol}
			}
			if diff := cmp.Diff(want, pod.Spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}
			if changed, _ := r.Default(pod); changed {
				t.Errorf("a second Default changed the pod again: %v", pod.Spec.Tolerations)
			}
		})
	}
}

// FuzzParseTolerations: any flag value parses or fails with an error, never a panic, and what
// parses is valid.
func FuzzParseTolerations(f *testing.F) {
	f.Add(`[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]`)
	f.Add(`[{"key":"a","value":"b","effect":"NoExecute","tolerationSeconds":-1}]`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseTolerations(s)
		if err != nil {
			return
		}
		for i := range ts {
			if err := validToleration(&ts[i]); err != nil {
				t.Fatalf("parsed an invalid toleration: %v", err)
			}
		}
	})
}
