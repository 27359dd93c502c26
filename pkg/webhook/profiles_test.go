package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Issue 39: with an exact profile, the webhook sends a GPU pod whose nodes kube-scheduler's own
// filters cannot tell (card rules, shares, MIG, a pod group) to the profile that scores every node,
// and a pod of whole cards of any model to the sampling one.
func TestDefaultPicksTheProfile(t *testing.T) {
	withAnn := func(k, v string) podOpt {
		return func(p *corev1.Pod) {
			if p.Annotations == nil {
				p.Annotations = map[string]string{}
			}
			p.Annotations[k] = v
		}
	}
	withCtr := func(c corev1.Container) podOpt {
		return func(p *corev1.Pod) { p.Spec.Containers = append(p.Spec.Containers, c) }
	}
	withInit := func(c corev1.Container) podOpt {
		return func(p *corev1.Pod) { p.Spec.InitContainers = append(p.Spec.InitContainers, c) }
	}
	withLabel := func(k, v string) podOpt {
		return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} }
	}
	named := func(n string) podOpt { return func(p *corev1.Pod) { p.Spec.SchedulerName = n } }
	const sampled, exact = "cardinal-scheduler", "cardinal-scheduler-exact"
	whole := withCtr(ctr("main", "nvidia.com/gpu", "2"))
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"whole cards", newPod(whole), sampled},
		{"whole cards, policies only", newPod(whole, withAnn(annotations.NodePolicy, "binpack"), withAnn(annotations.GPUPolicy, "spread")), sampled},
		{"numa-bind false", newPod(whole, withAnn(annotations.NUMABind, "false")), sampled},
		{"whole cards naming the exact profile (a full scan asked for)", newPod(whole, named(exact)), exact},
		{"use-gputype", newPod(whole, withAnn(annotations.UseGPUType, "A100")), exact},
		{"nouse-gputype", newPod(whole, withAnn(annotations.NoUseGPUType, "T4")), exact},
		{"use-gpuuuid", newPod(whole, withAnn(annotations.UseGPUUUID, "GPU-1")), exact},
		{"nouse-gpuuuid", newPod(whole, withAnn(annotations.NoUseGPUUUID, "GPU-1")), exact},
		{"numa-bind", newPod(whole, withAnn(annotations.NUMABind, "true")), exact},
		{"gpu-link", newPod(whole, withAnn(annotations.GPULink, "nvlink")), exact},
		{"memory share", newPod(withCtr(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "8000"))), exact},
		{"memory percentage", newPod(withCtr(ctr("main", "nvidia.com/gpumem-percentage", "50"))), exact},
		{"cores share in an init container", newPod(whole, withInit(ctr("init", "nvidia.com/gpu", "1", "nvidia.com/gpucores", "30"))), exact},
		{"MIG instance", newPod(withCtr(ctr("main", "nvidia.com/mig-1g.10gb", "1"))), exact},
		{"pod group", newPod(whole, withLabel(annotations.PodGroupName, "train-7")), exact},
		{"card rule, naming the sampling profile", newPod(whole, named(sampled), withAnn(annotations.UseGPUType, "A100")), exact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRules()
			r.ExactSchedulerName = exact
			r.Default(tc.pod)
			if got := tc.pod.Spec.SchedulerName; got != tc.want {
				t.Errorf("schedulerName %q, want %q", got, tc.want)
			}
			// Without an exact profile every GPU pod goes to the one profile.
			one := tc.pod.DeepCopy()
			one.Spec.SchedulerName = ""
			testRules().Default(one)
			if got := one.Spec.SchedulerName; got != sampled {
				t.Errorf("one profile: schedulerName %q, want %q", got, sampled)
			}
		})
	}
}

// A Binding posted around Cardinal for a GPU pod of the exact profile is refused like one of the
// sampling profile.
func TestValidateBindingRefusesForeignBindingOfEitherProfile(t *testing.T) {
	r := testRules()
	r.ExactSchedulerName = "cardinal-scheduler-exact"
	for _, name := range []string{"cardinal-scheduler", "cardinal-scheduler-exact"} {
		pod := newPod(func(p *corev1.Pod) {
			p.Spec.SchedulerName = name
			p.Spec.Containers = []corev1.Container{ctr("main", "nvidia.com/gpu", "1")}
		})
		err := r.ValidateBinding(&corev1.Binding{}, pod, "mallory")
		if err == nil {
			t.Fatalf("%s: a foreign Binding was accepted", name)
		}
		if want := `names scheduler "` + name + `"`; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %s", name, err, want)
		}
	}
}
