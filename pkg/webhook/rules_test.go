package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
)

func TestDefault(t *testing.T) {
	tests := []struct {
		name         string
		pod          *corev1.Pod
		want         *corev1.Pod // nil: unchanged
		wantWarnings []string
	}{{
		name: "a pod without GPU requests is left alone",
		pod:  newPod(containers(ctr("main", "cpu", "1"))),
	}, {
		name: "a GPU pod of the default scheduler goes to Cardinal",
		pod:  oneGPU(),
		want: oneGPU(scheduler("cardinal-scheduler")),
	}, {
		name: "a GPU pod naming no scheduler goes to Cardinal",
		pod:  oneGPU(scheduler("")),
		want: oneGPU(scheduler("cardinal-scheduler")),
	}, {
		name: "a GPU pod already naming Cardinal is unchanged",
		pod:  oneGPU(scheduler("cardinal-scheduler")),
	}, {
		name: "a GPU pod naming another scheduler is left to it",
		pod:  oneGPU(scheduler("volcano")),
	}, {
		name: "a mirror pod is left alone",
		pod:  oneGPU(annotated(corev1.MirrorPodAnnotationKey, "abc")),
	}, {
		name: "a GPU request in an init container only is enough",
		pod:  newPod(initContainers(ctr("setup", "nvidia.com/gpu", "1")), containers(ctr("main"))),
		want: newPod(scheduler("cardinal-scheduler"), initContainers(ctr("setup", "nvidia.com/gpu", "1")), containers(ctr("main"))),
	}, {
		name:         "gpumem without a card count gets one card",
		pod:          newPod(containers(ctr("main", "nvidia.com/gpumem", "4096"))),
		want:         newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpumem", "4096", "nvidia.com/gpu", "1"))),
		wantWarnings: []string{`container "main" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`},
	}, {
		name: "the card is added to requests too when the container lists requests",
		pod: newPod(containers(corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: res("nvidia.com/gpumem-percentage", "50"), Requests: res("nvidia.com/gpumem-percentage", "50", "cpu", "1"),
		}})),
		want: newPod(scheduler("cardinal-scheduler"), containers(corev1.Container{Name: "main", Resources: corev1.ResourceRequirements{
			Limits:   res("nvidia.com/gpumem-percentage", "50", "nvidia.com/gpu", "1"),
			Requests: res("nvidia.com/gpumem-percentage", "50", "cpu", "1", "nvidia.com/gpu", "1"),
		}})),
		wantWarnings: []string{`container "main" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`},
	}, {
		name: "gpucores in an init container and gpumem in an app container: one card each, one warning each",
		pod:  newPod(initContainers(ctr("warm", "nvidia.com/gpucores", "30")), containers(ctr("main", "nvidia.com/gpumem", "1024"), ctr("side", "cpu", "1"))),
		want: newPod(scheduler("cardinal-scheduler"), initContainers(ctr("warm", "nvidia.com/gpucores", "30", "nvidia.com/gpu", "1")),
			containers(ctr("main", "nvidia.com/gpumem", "1024", "nvidia.com/gpu", "1"), ctr("side", "cpu", "1"))),
		wantWarnings: []string{
			`container "warm" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`,
			`container "main" asks for a share of a card without nvidia.com/gpu: Cardinal added nvidia.com/gpu: 1 (one card)`,
		},
	}, {
		name: "an explicit nvidia.com/gpu: 0 is kept (validation refuses it)",
		pod:  newPod(containers(ctr("main", "nvidia.com/gpumem", "1024", "nvidia.com/gpu", "0"))),
		want: newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpumem", "1024", "nvidia.com/gpu", "0"))),
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
			if changed != (tt.want != nil) {
				t.Errorf("changed = %v, want %v", changed, tt.want != nil)
			}
			if diff := cmp.Diff(tt.wantWarnings, warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateCreate(t *testing.T) {
	tests := []struct {
		name         string
		pod          *corev1.Pod               // after Default
		cards        *Cards                    // nil: Cardinal knows no card
		user         authenticationv1.UserInfo // who creates it; empty: a tenant
		wantWarnings []string
		wantDenial   *Denial
	}{{
		name: "a plain GPU pod is admitted",
		pod:  oneGPU(scheduler("cardinal-scheduler")),
	}, {
		name:  "a pod without GPU requests is admitted",
		pod:   newPod(containers(ctr("main", "cpu", "1")), nodeName("n1")),
		cards: testCards(),
	}, {
		name: "a forged assignment is refused, even on a pod without GPU requests",
		pod:  newPod(containers(ctr("main")), annotated("cardinal.io/gpu-assignment", `{"v":1}`)),
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			"metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod",
		}},
	}, {
		name: "every forged internal annotation is named",
		pod:  oneGPU(annotated("cardinal.io/gpu-allocated", "x", "cardinal.io/gpu-inventory", "y")),
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			"metadata.annotations: cardinal.io/gpu-inventory is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod",
			"metadata.annotations: cardinal.io/gpu-allocated is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod",
		}},
	}, {
		name: "a forged annotation on a pod of another scheduler is refused too",
		pod:  oneGPU(scheduler("volcano"), annotated("cardinal.io/gpu-allocated", "x")),
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			"metadata.annotations: cardinal.io/gpu-allocated is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod",
		}},
	}, {
		name: "a GPU pod with spec.nodeName is refused with the way out",
		pod:  oneGPU(scheduler("cardinal-scheduler"), nodeName("gpu-1")),
		wantDenial: &Denial{Reason: ReasonNodeName, Details: []string{
			`spec.nodeName: "gpu-1" is set, which would bypass card selection: a pod requesting nvidia.com/gpu is placed by cardinal-scheduler, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: gpu-1) instead`,
		}},
	}, {
		name: "a pod of another scheduler with a bad selector is left to it",
		pod:  oneGPU(scheduler("volcano"), annotated("nvidia.com/use-gputype", ",")),
	}, {
		// Created on its node, it would skip every scheduler and get cards nobody counted.
		name: "a GPU pod of another scheduler with spec.nodeName is refused; its selectors stay its scheduler's",
		pod:  oneGPU(scheduler("volcano"), nodeName("gpu-1"), annotated("nvidia.com/use-gputype", ",")),
		wantDenial: &Denial{Reason: ReasonNodeName, Details: []string{
			`spec.nodeName: "gpu-1" is set, which would bypass scheduling: a pod requesting nvidia.com/gpu must be bound by its scheduler ("volcano"), so that its cards are counted before it runs; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: gpu-1) instead`,
		}},
	}, {
		name:  "a pod of another scheduler with spec.nodeName and no GPU is admitted",
		pod:   newPod(scheduler("volcano"), nodeName("gpu-1"), containers(ctr("main", "cpu", "1"))),
		cards: testCards(),
	}, {
		name:  "a kubelet's mirror pod is left alone",
		pod:   oneGPU(nodeName("gpu-1"), annotated(corev1.MirrorPodAnnotationKey, "abc")),
		cards: testCards(),
		user:  kubelet,
	}, {
		name:  "a tenant's mirror pod on a node is refused",
		pod:   oneGPU(nodeName("gpu-1"), annotated(corev1.MirrorPodAnnotationKey, "abc")),
		cards: testCards(),
		wantDenial: &Denial{Reason: ReasonMirrorPod, Details: []string{
			`metadata.annotations: kubernetes.io/config.mirror marks a mirror pod, which only a kubelet creates (user system:node:<node>), not "alice"; remove it from the pod`,
		}},
	}, {
		// NodeRestriction's identity needs both the name and the group.
		name: "a node's user name without the system:nodes group is no kubelet",
		pod:  oneGPU(nodeName("gpu-1"), annotated(corev1.MirrorPodAnnotationKey, "abc")),
		user: authenticationv1.UserInfo{Username: "system:node:gpu-1", Groups: []string{"system:authenticated"}},
		wantDenial: &Denial{Reason: ReasonMirrorPod, Details: []string{
			`metadata.annotations: kubernetes.io/config.mirror marks a mirror pod, which only a kubelet creates (user system:node:<node>), not "system:node:gpu-1"; remove it from the pod`,
		}},
	}, {
		name: "a tenant's mirror pod without a node is refused too",
		pod:  oneGPU(annotated(corev1.MirrorPodAnnotationKey, "abc")),
		wantDenial: &Denial{Reason: ReasonMirrorPod, Details: []string{
			`metadata.annotations: kubernetes.io/config.mirror marks a mirror pod, which only a kubelet creates (user system:node:<node>), not "alice"; remove it from the pod`,
		}},
	}, {
		name: "an empty entry in use-gputype",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "A100,")),
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`nvidia.com/use-gputype: empty entry at position 2 in "A100,"`,
		}},
	}, {
		name: "the same UUID in use and nouse",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gpuuuid", "GPU-1,GPU-2", "nvidia.com/nouse-gpuuuid", "GPU-2")),
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`nvidia.com/nouse-gpuuuid: GPU-2 is also in nvidia.com/use-gpuuuid`,
		}},
	}, {
		name: "an unknown policy and a numa-bind that is not a boolean",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/node-policy", "fastest", "nvidia.com/numa-bind", "yes")),
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`nvidia.com/numa-bind: "yes" is not true or false`,
			`cardinal.io/node-policy: unknown policy "fastest" (known: binpack, spread, frag-aware)`,
		}},
	}, {
		name: "a link requirement Cardinal does not know is refused, naming the annotation",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-link", "pcie")),
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`cardinal.io/gpu-link: "pcie" is not a link requirement (known: nvlink)`,
		}},
	}, {
		name: "an NVLink requirement is admitted",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-link", "NVLink")),
	}, {
		name: "percentages out of range",
		pod:  newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem-percentage", "140", "nvidia.com/gpucores", "101"))),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/gpumem-percentage: 140 is above 100`,
			`container "main": nvidia.com/gpucores: 101 is above 100`,
		}},
	}, {
		name: "a share of a card with nvidia.com/gpu: 0",
		pod:  newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "0", "nvidia.com/gpumem", "1024"))),
		wantDenial: &Denial{Reason: ReasonInvalidRequest, Details: []string{
			`container "main": nvidia.com/gpu: 0 while nvidia.com/gpumem asks for a share of a card; set nvidia.com/gpu: 1 or more`,
		}},
	}, {
		name:  "memory larger than the largest card (80 GiB = 81920 MiB) is refused",
		pod:   newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "81921"))),
		cards: testCards(),
		wantDenial: &Denial{Reason: ReasonMemoryTooLarge, Details: []string{
			`container "main": nvidia.com/gpumem: 81921 MiB is more than the largest card Cardinal knows holds (81920 MiB, NVIDIA A100-SXM4-80GB)`,
		}},
	}, {
		name:  "memory exactly the largest card is admitted",
		pod:   newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "81920"))),
		cards: testCards(),
	}, {
		name: "any memory is admitted while Cardinal knows no card",
		pod:  newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000000"))),
	}, {
		name: "every problem is named at once; the first class is the reason",
		pod: newPod(scheduler("cardinal-scheduler"), nodeName("gpu-1"), annotated("nvidia.com/nouse-gputype", " "),
			containers(ctr("main", "nvidia.com/gpu", "65"))),
		wantDenial: &Denial{Reason: ReasonNodeName, Details: []string{
			`spec.nodeName: "gpu-1" is set, which would bypass card selection: a pod requesting nvidia.com/gpu is placed by cardinal-scheduler, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (kubernetes.io/hostname: gpu-1) instead`,
			`container "main": nvidia.com/gpu: 65 is above 64`,
			`nvidia.com/nouse-gputype: empty entry at position 1 in " "`,
		}},
	}, {
		name:  "a type no known card has is admitted with a warning",
		pod:   oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "H100")),
		cards: testCards(),
		wantWarnings: []string{
			"no card Cardinal knows matches use-gputype=h100 (known: 8× NVIDIA A100-SXM4-80GB, 3× Tesla T4); the pod stays Pending until such a card joins",
		},
	}, {
		name:  "a UUID no known card has is admitted with a warning",
		pod:   oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gpuuuid", "GPU-x")),
		cards: testCards(),
		wantWarnings: []string{
			"no card Cardinal knows matches use-gpuuuid=GPU-x (known: 8× NVIDIA A100-SXM4-80GB, 3× Tesla T4); the pod stays Pending until such a card joins",
		},
	}, {
		name: "a type no card has is not warned about while Cardinal knows no card",
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "H100")),
	}, {
		name:  "a type that matches is admitted without warnings",
		pod:   oneGPU(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "a100", "nvidia.com/nouse-gpuuuid", "GPU-a-0")),
		cards: testCards(),
	}, {
		name:  "memory the selected type cannot hold (T4: 15360 MiB < 20000 MiB) is a warning",
		pod:   newPod(scheduler("cardinal-scheduler"), annotated("nvidia.com/use-gputype", "T4"), containers(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "20000"))),
		cards: testCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/gpumem: no card Cardinal knows that matches use-gputype=t4 has 20000 MiB; the pod stays Pending until one joins`,
		},
	}, {
		name:  "more cards than any node has (9 > 8) is a warning",
		pod:   newPod(scheduler("cardinal-scheduler"), containers(ctr("main", "nvidia.com/gpu", "9"))),
		cards: testCards(),
		wantWarnings: []string{
			`container "main": nvidia.com/gpu: 9 is more cards than any node Cardinal knows has (at most 8); the pod stays Pending until such a node joins`,
		},
	}, {
		name: "a privileged GPU container is admitted with a warning",
		pod:  oneGPU(scheduler("cardinal-scheduler"), privileged),
		wantWarnings: []string{
			`container "main" is privileged: it can see and use every GPU on its node, not only the cards Cardinal assigns it`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user := tt.user
			if user.Username == "" {
				user = tenant
			}
			warnings, err := testRules().ValidateCreate(tt.pod, tt.cards, user)
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

func TestValidateUpdate(t *testing.T) {
	const (
		alice    = "alice"
		extender = "system:serviceaccount:cardinal-system:extender"
	)
	assigned := annotated("cardinal.io/gpu-assignment", `{"v":1,"node":"a"}`)
	tests := []struct {
		name       string
		old, pod   *corev1.Pod
		user       string
		wantDenial *Denial
	}{{
		name: "an ordinary user may not add an assignment",
		old:  oneGPU(), pod: oneGPU(assigned), user: alice,
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			`metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); "alice" may not add it`,
		}},
	}, {
		name: "nor change it",
		old:  oneGPU(assigned), pod: oneGPU(annotated("cardinal.io/gpu-assignment", `{"v":1,"node":"b"}`)), user: alice,
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			`metadata.annotations: cardinal.io/gpu-assignment is written only by Cardinal (its scheduler extender and device plugin); "alice" may not change it`,
		}},
	}, {
		name: "nor remove an allocation record, even from a pod without GPU requests",
		old:  newPod(containers(ctr("main")), annotated("cardinal.io/gpu-allocated", "x")), pod: newPod(containers(ctr("main"))), user: alice,
		wantDenial: &Denial{Reason: ReasonInternalAnnotation, Details: []string{
			`metadata.annotations: cardinal.io/gpu-allocated is written only by Cardinal (its scheduler extender and device plugin); "alice" may not remove it`,
		}},
	}, {
		name: "Cardinal's service account writes the assignment",
		old:  oneGPU(), pod: oneGPU(assigned), user: extender,
	}, {
		name: "an ordinary user may change anything else of a pod that has an assignment",
		old:  oneGPU(assigned), pod: oneGPU(assigned, annotated("team", "a")), user: alice,
	}, {
		name: "a selector changed to something malformed is refused",
		old:  oneGPU(scheduler("cardinal-scheduler")), pod: oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-policy", "random")), user: alice,
		wantDenial: &Denial{Reason: ReasonInvalidSelector, Details: []string{
			`cardinal.io/gpu-policy: unknown policy "random" (known: binpack, spread, frag-aware)`,
		}},
	}, {
		name: "a malformed selector that was already there does not block other updates",
		old:  oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-policy", "random")),
		pod:  oneGPU(scheduler("cardinal-scheduler"), annotated("cardinal.io/gpu-policy", "random", "team", "a")), user: alice,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warnings, err := testRules().ValidateUpdate(tt.old, tt.pod, tt.user)
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
			if len(warnings) != 0 {
				t.Errorf("warnings = %q, want none", warnings)
			}
		})
	}
}
