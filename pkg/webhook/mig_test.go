package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// migCards: node-m has two A100-80GB in MIG mode, one split into 7× 1g.10gb (MIG-m0-0..6), one into
// 3g.40gb + 2g.20gb + 1g.10gb (MIG-m1-0..2); node-h has 2 whole H100s.
func migCards() *Cards {
	parent := func(uuid string, profiles ...string) annotations.GPU {
		g := annotations.GPU{UUID: uuid, Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabled}}
		for k, p := range profiles {
			g.MIG.Instances = append(g.MIG.Instances, annotations.MIGInstance{UUID: "MIG-" + uuid[4:] + "-" + string(rune('0'+k)), Profile: p, Size: 1, Healthy: true})
		}
		return g
	}
	return NewCards(map[string]annotations.Inventory{
		"node-m": {V: 1, GPUs: []annotations.GPU{
			parent("GPU-m0", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"),
			parent("GPU-m1", "3g.40gb", "2g.20gb", "1g.10gb"),
		}},
		"node-h": {V: 1, GPUs: cardsOf("h", "NVIDIA H100 80GB HBM3", 81559, 2)},
	})
}

// migPod is a pod of one container asking for n instances of a MIG profile key.
func migPod(key, n string, opts ...podOpt) *corev1.Pod {
	return newPod(append([]podOpt{containers(ctr("main", "nvidia.com/mig-"+key, n))}, opts...)...)
}

func TestCardsMIG(t *testing.T) {
	cards := migCards()
	tests := []struct {
		name string
		ann  map[string]string
		key  string
		want bool
	}{
		{"a profile both parents have", nil, "1g.10gb", true},
		{"a profile of one parent", nil, "3g.40gb", true},
		{"a profile no card has", nil, "7g.80gb", false},
		{"the parent's model", map[string]string{annotations.UseGPUType: "a100"}, "2g.20gb", true},
		{"another model", map[string]string{annotations.UseGPUType: "H100"}, "1g.10gb", false},
		{"the parent's model excluded", map[string]string{annotations.NoUseGPUType: "A100"}, "1g.10gb", false},
		{"the parent's UUID", map[string]string{annotations.UseGPUUUID: "GPU-m1"}, "3g.40gb", true},
		{"a parent without the profile", map[string]string{annotations.UseGPUUUID: "GPU-m0"}, "3g.40gb", false},
		{"the instance's UUID", map[string]string{annotations.UseGPUUUID: "MIG-m1-0"}, "3g.40gb", true},
		{"another profile's instance UUID", map[string]string{annotations.UseGPUUUID: "MIG-m1-1"}, "3g.40gb", false},
		{"the only 3g.40gb's parent excluded", map[string]string{annotations.NoUseGPUUUID: "GPU-m1"}, "3g.40gb", false},
		{"the only 3g.40gb excluded by its UUID", map[string]string{annotations.NoUseGPUUUID: "MIG-m1-0"}, "3g.40gb", false},
		{"one parent of 1g.10gb excluded: the other has some", map[string]string{annotations.NoUseGPUUUID: "GPU-m0"}, "1g.10gb", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, err := annotations.ParseSelector(tt.ann)
			if err != nil {
				t.Fatal(err)
			}
			if got := cards.FitsMIG(&sel, tt.key); got != tt.want {
				t.Errorf("FitsMIG(%s, %s) = %v, want %v", sel.String(), tt.key, got, tt.want)
			}
		})
	}
	// 7 + 1 instances of 1g.10gb, all on node-m.
	for key, want := range map[string]int{"1g.10gb": 8, "3g.40gb": 1, "7g.80gb": 0} {
		if got := cards.MaxInstancesPerNode(key); got != want {
			t.Errorf("MaxInstancesPerNode(%s) = %d, want %d", key, got, want)
		}
	}
	if diff := cmp.Diff("8× 1g.10gb, 1× 2g.20gb, 1× 3g.40gb", cards.MIGSummary()); diff != "" {
		t.Errorf("MIGSummary (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff("no MIG instances", testCards().MIGSummary()); diff != "" {
		t.Errorf("MIGSummary of whole cards (-want +got):\n%s", diff)
	}
	// Parents in MIG mode are cards too (their operator may turn MIG off): 2 A100 and 2 H100.
	if got := [3]int{cards.Nodes(), cards.Total(), cards.MaxPerNode()}; got != [3]int{2, 4, 2} {
		t.Errorf("nodes, cards, most per node = %v", got)
	}
}

func TestDefaultMIG(t *testing.T) {
	tests := []struct {
		name string
		pod  *corev1.Pod
		want *corev1.Pod // nil: unchanged
	}{{
		// kube-scheduler calls the extender only for pods naming one of its managedResources.
		name: "a MIG pod goes to Cardinal, with cardinal.io/mig: 0 naming the extender's resource",
		pod:  migPod("1g.10gb", "2"),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/mig-1g.10gb", "2", "cardinal.io/mig", "0"))),
	}, {
		name: "the count is added to requests too when the container lists requests",
		pod: newPod(containers(corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: res("nvidia.com/mig-3g.40gb", "1"), Requests: res("nvidia.com/mig-3g.40gb", "1", "cpu", "1"),
		}})),
		want: newPod(scheduler("cardinal-scheduler"), containers(corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
			Limits:   res("nvidia.com/mig-3g.40gb", "1", "cardinal.io/mig", "0"),
			Requests: res("nvidia.com/mig-3g.40gb", "1", "cpu", "1", "cardinal.io/mig", "0"),
		}})),
	}, {
		name: "a MIG request in an init container only is enough",
		pod:  newPod(initContainers(ctr("setup", "nvidia.com/mig-3g.40gb", "1")), containers(ctr("main"))),
		want: newPod(scheduler("cardinal-scheduler"), initContainers(ctr("setup", "nvidia.com/mig-3g.40gb", "1", "cardinal.io/mig", "0")), containers(ctr("main"))),
	}, {
		name: "a MIG pod naming another scheduler is left to it",
		pod:  migPod("1g.10gb", "1", scheduler("volcano")),
	}, {
		name: "a card count already there is kept (validation refuses 1)",
		pod:  newPod(containers(ctr("main", "nvidia.com/mig-1g.10gb", "1", "nvidia.com/gpu", "1"))),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/mig-1g.10gb", "1", "nvidia.com/gpu", "1", "cardinal.io/mig", "0"))),
	}, {
		// nvidia.com/gpu: 0 would be refused by the kubelet of a node whose cards are all in MIG mode.
		name: "a MIG container never gets nvidia.com/gpu",
		pod:  migPod("2g.20gb", "1"),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/mig-2g.20gb", "1", "cardinal.io/mig", "0"))),
	}, {
		// Not nvidia.com/gpu: 1, which would only make a second thing to refuse.
		name: "a share beside MIG instances gets no card, only the marker",
		pod:  newPod(containers(ctr("main", "nvidia.com/mig-1g.10gb", "1", "nvidia.com/gpumem", "1024"))),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/mig-1g.10gb", "1", "nvidia.com/gpumem", "1024", "cardinal.io/mig", "0"))),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod.DeepCopy()
			changed, warnings := testRules().Default(pod)
			want := tt.want
			if want == nil {
				want = tt.pod
			}
			if diff := cmp.Diff(want, pod); diff != "" {
				t.Errorf("pod (-want +got):\n%s", diff)
			}
			if changed != (tt.want != nil) || len(warnings) != 0 {
				t.Errorf("changed = %v, warnings %q; want %v, none", changed, warnings, tt.want != nil)
			}
			// What Default made passes the validation (the share aside), and is the same request.
			if tt.want != nil && !hasResource(&pod.Spec.Containers[0], "nvidia.com/gpumem") {
				if _, err := testRules().ValidateCreate(pod, migCards(), tenant); (err != nil) != hasResource(&tt.pod.Spec.Containers[0], "nvidia.com/gpu") {
					t.Errorf("ValidateCreate after Default: %v", err)
				}
			}
		})
	}
}

func TestValidateCreateMIG(t *testing.T) {
	const combined = `cannot be combined with nvidia.com/gpu, nvidia.com/gpumem, nvidia.com/gpumem-percentage or nvidia.com/gpucores in one container (a container takes whole cards, shares of cards, or MIG instances)`
	cardinal := scheduler("cardinal-scheduler")
	tests := []struct {
		name         string
		pod          *corev1.Pod // after Default
		cards        *Cards
		wantWarnings []string
		wantDenial   *Denial
	}{{
		name:  "instances of a known profile are admitted",
		pod:   newPod(cardinal, containers(ctr("main", "nvidia.com/mig-1g.10gb", "7", "cardinal.io/mig", "0"))),
		cards: migCards(),
	}, {
		name:  "a profile with +me is admitted while Cardinal knows no card",
		pod:   migPod("1g.10gb.me", "1", cardinal),
		cards: nil,
	}, {
		name: "cards and instances in one container are refused with the parser's message",
		pod:  newPod(cardinal, containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "1"))),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/mig-1g.10gb: ` + combined,
		}},
	}, {
		name: "a share beside instances is refused once (Default added 0 cards)",
		pod:  newPod(cardinal, containers(ctr("main", "nvidia.com/gpucores", "30", "nvidia.com/mig-1g.10gb", "1", "cardinal.io/mig", "0"))),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/mig-1g.10gb: ` + combined,
		}},
	}, {
		name: "two profiles in one container are refused, both named",
		pod:  newPod(cardinal, containers(ctr("main", "nvidia.com/mig-1g.10gb", "1", "nvidia.com/mig-2g.20gb", "1"))),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/mig-2g.20gb: asks for a second MIG profile beside nvidia.com/mig-1g.10gb; a container takes instances of one profile (split it into containers)`,
		}},
	}, {
		name: "cards and instances in two containers of one pod are admitted",
		pod:  newPod(cardinal, containers(ctr("train", "nvidia.com/gpu", "1"), ctr("serve", "nvidia.com/mig-1g.10gb", "1"))),
	}, {
		name: "a malformed profile is refused",
		pod:  migPod("1g.10", "1", cardinal),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/mig-1g.10: "1g.10" is not a MIG profile (resources are named like nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.40gb.me)`,
		}},
	}, {
		name: "a MIG pod setting NVIDIA_VISIBLE_DEVICES is refused",
		pod:  newPod(cardinal, containers(withEnv(ctr("main", "nvidia.com/mig-1g.10gb", "1"), "NVIDIA_VISIBLE_DEVICES"))),
		wantDenial: &Denial{Reason: ReasonDeviceEnv, Details: []string{
			`container "main": env NVIDIA_VISIBLE_DEVICES: it chooses the cards the NVIDIA container runtime exposes; Cardinal's device plugin sets it to the cards it assigned; remove it`,
		}},
	}, {
		name: "a MIG pod with spec.nodeName is refused, naming what it asks for",
		pod:  newPod(cardinal, nodeName("gpu-1"), containers(ctr("main", "nvidia.com/mig-3g.40gb", "1", "cardinal.io/mig", "0"))),
		wantDenial: &Denial{Reason: ReasonNodeName, Details: []string{
			`spec.nodeName: "gpu-1" is set, which would bypass card selection: a pod requesting nvidia.com/mig-3g.40gb is placed by cardinal-scheduler, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: gpu-1) instead`,
		}},
	}, {
		name: "a pod asking for cards and, in another container, instances names the cards",
		pod:  newPod(cardinal, nodeName("gpu-1"), containers(ctr("serve", "nvidia.com/mig-1g.10gb", "1", "cardinal.io/mig", "0"), ctr("train", "nvidia.com/gpu", "1"))),
		wantDenial: &Denial{Reason: ReasonNodeName, Details: []string{
			`spec.nodeName: "gpu-1" is set, which would bypass card selection: a pod requesting nvidia.com/gpu is placed by cardinal-scheduler, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: gpu-1) instead`,
		}},
	}, {
		name: "a selector of a MIG pod is checked",
		pod:  migPod("1g.10gb", "1", cardinal, annotated("nvidia.com/use-gpuuuid", "MIG-a,")),
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`nvidia.com/use-gpuuuid: empty entry at position 2 in "MIG-a,"`,
		}},
	}, {
		name:  "an instance's UUID is no unknown card",
		pod:   migPod("3g.40gb", "1", cardinal, annotated("nvidia.com/use-gpuuuid", "MIG-m1-0")),
		cards: migCards(),
	}, {
		name:  "the parent's model is no unknown card",
		pod:   migPod("2g.20gb", "1", cardinal, annotated("nvidia.com/use-gputype", "A100")),
		cards: migCards(),
	}, {
		name:  "a profile no node has is admitted with a warning",
		pod:   migPod("7g.80gb", "1", cardinal),
		cards: migCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/mig-7g.80gb: no 7g.80gb instance Cardinal knows (known: 8× 1g.10gb, 1× 2g.20gb, 1× 3g.40gb); the pod stays Pending until one joins`,
		},
	}, {
		name:  "a profile whose parents are all excluded is admitted with a warning",
		pod:   migPod("3g.40gb", "1", cardinal, annotated("nvidia.com/nouse-gpuuuid", "GPU-m1")),
		cards: migCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/mig-3g.40gb: no 3g.40gb instance Cardinal knows that matches nouse-gpuuuid=GPU-m1 (known: 8× 1g.10gb, 1× 2g.20gb, 1× 3g.40gb); the pod stays Pending until one joins`,
		},
	}, {
		name:  "instances of a model that is not their parent's is a warning",
		pod:   migPod("1g.10gb", "1", cardinal, annotated("nvidia.com/use-gputype", "H100")),
		cards: migCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/mig-1g.10gb: no 1g.10gb instance Cardinal knows that matches use-gputype=h100 (known: 8× 1g.10gb, 1× 2g.20gb, 1× 3g.40gb); the pod stays Pending until one joins`,
		},
	}, {
		name:  "more instances than any node has (9 > 8) is a warning",
		pod:   migPod("1g.10gb", "9", cardinal),
		cards: migCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/mig-1g.10gb: 9 is more 1g.10gb instances than any node Cardinal knows has (at most 8); the pod stays Pending until such a node joins`,
		},
	}, {
		// Instance counts are not card counts: 3 instances on a node of 2 cards is no warning.
		name:  "instances are not counted against cards per node",
		pod:   migPod("1g.10gb", "3", cardinal),
		cards: migCards(),
	}, {
		name: "a privileged MIG container is admitted with a warning",
		pod:  migPod("1g.10gb", "1", cardinal, privileged),
		wantWarnings: []string{
			`container "main" is privileged: it can see and use every GPU on its node, not only the cards Cardinal assigns it`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, err := testRules().ValidateCreate(tt.pod, tt.cards, tenant)
			var got *Denial
			if err != nil {
				d, ok := IsDenial(err)
				if !ok {
					t.Fatalf("error is not a denial: %v", err)
				}
				got = d
			}
			if diff := cmp.Diff(tt.wantDenial, got); diff != "" {
				t.Errorf("denial (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateUpdateMIG(t *testing.T) {
	old := migPod("1g.10gb", "1", scheduler("cardinal-scheduler"))
	pod := migPod("1g.10gb", "1", scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-policy", "random"))
	_, err := testRules().ValidateUpdate(old, pod, "alice")
	want := &Denial{Reason: ReasonInvalidSelector, Details: []string{`cardinal.io/gpu-policy: unknown policy "random" (known: binpack, spread, frag-aware)`}}
	d, _ := IsDenial(err)
	if diff := cmp.Diff(want, d); diff != "" {
		t.Errorf("denial (-want +got):\n%s", diff)
	}
}

// A workload's template is refused at create for what would refuse its pods.
func TestValidateTemplateMIG(t *testing.T) {
	tmpl := template(newPod(containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/mig-1g.10gb", "1"))))
	_, err := testRules().ValidateTemplate("ns", &tmpl, migCards())
	d, ok := IsDenial(err)
	if !ok || d.Reason != ReasonInvalidRequest {
		t.Fatalf("ValidateTemplate = %v, want a denial for an invalid request", err)
	}
	tmpl = template(migPod("2g.20gb", "1"))
	if warnings, err := testRules().ValidateTemplate("ns", &tmpl, migCards()); err != nil || len(warnings) != 0 {
		t.Errorf("ValidateTemplate of a MIG template = %q, %v; want admitted without warnings", warnings, err)
	}
}

// A card of a dynamic MIG pool serves its allowed profiles' placements: they count as instances of
// their profile (none of its instances does: they are what is occupied), so a pod asking a
// profile no instance has yet gets no warning.
func TestCardsDynamicMIG(t *testing.T) {
	g := annotations.GPU{UUID: "GPU-d", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, Shares: 1, MIG: &annotations.MIG{Mode: annotations.MIGEnabled,
		Instances: []annotations.MIGInstance{{UUID: "MIG-x", Profile: "2g.20gb", Start: 0, Size: 2, Healthy: true}},
		DynamicV:  annotations.MIGDynamicVersion, Dynamic: []annotations.MIGDynamicProfile{
			{Profile: "3g.40gb", Size: 4, Starts: []int{0, 4}}, {Profile: "1g.10gb", Size: 1, Starts: []int{0, 1, 2, 3, 4, 5, 6}}}}}
	cards := NewCards(map[string]annotations.Inventory{"node-d": {V: 1, GPUs: []annotations.GPU{g}}})
	for key, want := range map[string]int{"3g.40gb": 2, "1g.10gb": 7, "2g.20gb": 0} {
		if got := cards.MaxInstancesPerNode(key); got != want {
			t.Errorf("MaxInstancesPerNode(%s) = %d, want %d", key, got, want)
		}
	}
	sel := annotations.Selector{}
	if !cards.FitsMIG(&sel, "3g.40gb") {
		t.Error("FitsMIG(3g.40gb) = false on a dynamic card that allows it")
	}
	if cards.FitsMIG(&sel, "2g.20gb") {
		t.Error("FitsMIG(2g.20gb) = true: the dynamic card does not allow it (its 2g.20gb instance is occupancy)")
	}
}
