package webhook

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// TestREADMEMessages keeps docs/webhook.md honest: every message it quotes is one the
// rules produce for the pod described next to it.
func TestREADMEMessages(t *testing.T) {
	raw, err := os.ReadFile("../../docs/webhook.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(raw)
	const begin, end = "<!-- webhook:begin -->", "<!-- webhook:end -->"
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		t.Fatalf("docs/webhook.md: no %s ... %s section", begin, end)
	}
	// Markdown wraps long lines; compare with single spaces.
	section := strings.Join(strings.Fields(s[i:j]), " ")

	r := testRules()
	var messages []string
	add := func(warnings []string, err error) {
		messages = append(messages, warnings...)
		if d, ok := IsDenial(err); ok {
			messages = append(messages, d.Details...)
		}
	}
	main := func(limits ...string) podOpt { return containers(ctr("main", limits...)) }
	cards := NewCards(nil)
	known := testCards()
	twoA100 := NewCards(map[string]annotations.Inventory{"a": {V: 1, GPUs: cardsOf("a", "NVIDIA A100-SXM4-80GB", 81920, 2)}})
	for _, c := range []struct {
		pod   *corev1.Pod
		cards *Cards
	}{
		{newPod(annotated("cardinal.io/gpu-assignment", "{}"), main()), cards},
		{newPod(nodeName("gpu-1"), main("nvidia.com/gpu", "1")), cards},
		{newPod(scheduler("volcano"), nodeName("gpu-1"), main("nvidia.com/gpu", "1")), cards},
		{newPod(annotated("nvidia.com/use-gputype", "A100,"), main("nvidia.com/gpu", "1")), cards},
		{newPod(annotated("nvidia.com/use-gpuuuid", "GPU-1,GPU-2", "nvidia.com/nouse-gpuuuid", "GPU-2"), main("nvidia.com/gpu", "1")), cards},
		{newPod(annotated("nvidia.com/numa-bind", "yes", "cardinal.io/node-policy", "fastest"), main("nvidia.com/gpu", "1")), cards},
		{newPod(main("nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "140", "nvidia.com/gpucores", "101")), cards},
		{newPod(main("nvidia.com/gpu", "65")), cards},
		{newPod(main("nvidia.com/gpu", "0", "nvidia.com/gpumem", "1024")), cards},
		{newPod(main("nvidia.com/gpu", "1", "nvidia.com/gpumem", "90000")), known},
		{newPod(main("nvidia.com/gpu", "1"), privileged), cards},
		{newPod(annotated("nvidia.com/use-gputype", "H100"), main("nvidia.com/gpu", "1")), twoA100},
		{newPod(main("nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "1")), cards},
		{newPod(main("nvidia.com/mig-1g.10gb", "1", "nvidia.com/mig-2g.20gb", "1")), cards},
		{newPod(main("nvidia.com/mig-3g.40gb", "1")), twoA100},
		{newPod(containers(withEnv(ctr("main"), "NVIDIA_VISIBLE_DEVICES"))), cards},
		{newPod(containers(withEnvFrom(ctr("main"), "NVIDIA_", "settings"))), cards},
		{newPod(containers(ctr("train", "nvidia.com/gpu", "1", "cardinal.io/host", "0"))), cards},
		{newPod(nodeName("gpu-1"), annotated(corev1.MirrorPodAnnotationKey, "a1"), main("nvidia.com/gpu", "1")), cards},
		{newPod(annotated("nvidia.com/use-gputype", "A100\x1b[2K"), main("nvidia.com/gpu", "1")), cards},
	} {
		add(r.ValidateCreate(c.pod, c.cards, tenant))
	}
	for _, err := range r.hostMarkerRefusals(newPod(containers(ctr("web", "cardinal.io/host", "2")))) {
		messages = append(messages, err.Error())
	}
	_, defaulted := r.Default(newPod(main("nvidia.com/gpumem", "1024")))
	messages = append(messages, defaulted...)
	add(r.ValidateUpdate(oneGPU(), oneGPU(annotated("cardinal.io/gpu-assignment", "{}")), "alice"))
	tmpl := template(newPod(annotated("nvidia.com/use-gputype", "A100,"), main("nvidia.com/gpu", "1")))
	_, err = r.ValidateTemplate("ns", &tmpl, cards)
	if d, ok := IsDenial(err); ok {
		messages = append(messages, `admission webhook "workloads.webhook.cardinal.io" denied the request: spec.template: `+d.Details[0])
	}
	train := oneGPU(scheduler("cardinal-scheduler"))
	train.Namespace, train.Name = "team", "train"
	add(nil, r.ValidateBinding(&corev1.Binding{}, train, "system:serviceaccount:team:volcano"))
	forged := &corev1.Binding{}
	forged.Annotations = map[string]string{annotations.GPUAssignment: "{}"}
	add(nil, r.ValidateBinding(forged, nil, "system:serviceaccount:team:volcano"))
	if len(messages) != 28 {
		t.Fatalf("got %d messages, want 28: %q", len(messages), messages)
	}
	for _, m := range messages {
		if !strings.Contains(section, m) {
			t.Errorf("docs/webhook.md does not quote: %s", m)
		}
	}
}
