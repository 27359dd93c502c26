package webhook

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// Reason classifies why the webhook refused a pod. It is the `reason` label of the decisions metric
// and the key people grep logs for; the message the client sees is made from the Denial's details.
type Reason string

const (
	// ReasonInternalAnnotation: a pod carries, or an update changes, an annotation only Cardinal writes.
	ReasonInternalAnnotation Reason = "InternalAnnotation"
	// ReasonNodeName: a GPU pod names its node, which would bypass card selection.
	ReasonNodeName Reason = "NodeNameSet"
	// ReasonInvalidRequest: a container's managed resources are malformed.
	ReasonInvalidRequest Reason = "InvalidResourceRequest"
	// ReasonInvalidSelector: a selector or policy annotation is malformed.
	ReasonInvalidSelector Reason = "InvalidSelector"
	// ReasonDeviceEnv: a container sets a variable that chooses cards or limits (deviceVars).
	ReasonDeviceEnv Reason = "DeviceEnvironment"
	// ReasonMemoryTooLarge: a container asks for more memory per card than any card Cardinal knows has.
	ReasonMemoryTooLarge Reason = "MemoryLargerThanAnyCard"
	// ReasonMirrorPod: a GPU pod marked as a mirror pod is created by someone other than a kubelet.
	ReasonMirrorPod Reason = "ForgedMirrorPod"
)

// Denial is the error the validation returns when a pod must be refused. Details are complete
// sentences naming the key and the value; Reason is the first problem's class.
type Denial struct {
	Reason  Reason
	Details []string
}

func (d *Denial) Error() string { return strings.Join(d.Details, "; ") }

// denials collects problems of several classes; the first class found becomes the Reason.
type denials struct{ d *Denial }

func (ds *denials) add(reason Reason, err error) {
	if err == nil {
		return
	}
	if ds.d == nil {
		ds.d = &Denial{Reason: reason}
	}
	ds.d.Details = append(ds.d.Details, flatten(err)...)
}

func (ds *denials) err() error {
	if ds.d == nil {
		return nil
	}
	return ds.d
}

// flatten turns an errors.Join tree into one message per leaf, so every problem reads on its own.
func flatten(err error) []string {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []string
		for _, e := range j.Unwrap() {
			if e != nil {
				out = append(out, flatten(e)...)
			}
		}
		return out
	}
	return []string{err.Error()}
}

// Rules are the webhook's decisions. They read only their arguments: the same pod and the same cards
// always give the same answer.
type Rules struct {
	// SchedulerName is the kube-scheduler profile that runs Cardinal's extender.
	SchedulerName string
	// ExactSchedulerName, when set, is Cardinal's second profile, which scores every node
	// (percentageOfNodesToScore 100): pods whose feasible nodes kube-scheduler's own filters cannot
	// tell (NeedsFullScan) are sent to it, the others to SchedulerName, which may sample (see
	// docs/extender.md, "Two profiles"). Empty: every GPU pod goes to SchedulerName.
	ExactSchedulerName string
	// Resources are the managed resource names.
	Resources annotations.ResourceNames
	// TrustedUsers may add, change and remove Cardinal's internal annotations on pods (the extender's
	// and the device plugin's service accounts, as `system:serviceaccount:<ns>:<name>`).
	TrustedUsers []string
	// DeviceEnvNamespaces may set the device variables (deviceVars) in their pods.
	DeviceEnvNamespaces []string
	// GPUTolerations are added to every GPU pod Cardinal places (tolerations.go); nil: none.
	GPUTolerations []corev1.Toleration
}

// IsGPUPod reports whether any container, init containers included, names a managed resource.
func (r *Rules) IsGPUPod(pod *corev1.Pod) bool {
	return annotations.HasManagedResource(pod, r.Resources)
}

// isNode reports whether user is a kubelet, as the API server's NodeRestriction admission knows one:
// the group system:nodes and a user name system:node:<node>.
func isNode(user authenticationv1.UserInfo) bool {
	return strings.HasPrefix(user.Username, "system:node:") && len(user.Username) > len("system:node:") &&
		slices.Contains(user.Groups, "system:nodes")
}

// placedByCardinal reports whether Cardinal is (or is about to become) the pod's scheduler: it names
// no scheduler, the default one, or Cardinal's. A pod naming another scheduler is left to it, and a
// mirror pod (a static pod the kubelet already runs) has no scheduler at all.
func (r *Rules) placedByCardinal(pod *corev1.Pod) bool {
	if _, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	switch pod.Spec.SchedulerName {
	case "", corev1.DefaultSchedulerName, r.SchedulerName:
		return true
	}
	return r.ExactSchedulerName != "" && pod.Spec.SchedulerName == r.ExactSchedulerName
}

// IsCardinalProfile reports whether name is one of Cardinal's kube-scheduler profiles.
func (r *Rules) IsCardinalProfile(name string) bool {
	return name == r.SchedulerName || (r.ExactSchedulerName != "" && name == r.ExactSchedulerName)
}

// profileFor is the profile a GPU pod Cardinal places is sent to: ExactSchedulerName when there is
// one and the pod names it (a full scan asked for) or needs a full scan, else SchedulerName.
func (r *Rules) profileFor(pod *corev1.Pod) string {
	if r.ExactSchedulerName != "" && (pod.Spec.SchedulerName == r.ExactSchedulerName || NeedsFullScan(pod, r.Resources)) {
		return r.ExactSchedulerName
	}
	return r.SchedulerName
}

// NeedsFullScan reports whether the nodes that can take the pod may be few among those
// kube-scheduler's own filters find feasible, so that a sample of those could miss every one:
//   - card rules (use-gputype, nouse-gputype, use-gpuuuid, nouse-gpuuuid), numa-bind=true or a
//     gpu-link rule: only some cards, nodes or layouts qualify, which no in-tree filter sees;
//   - a share of a card (gpumem, gpumem-percentage, gpucores): kube-scheduler counts free device
//     IDs, not the memory or compute left on each card;
//   - MIG instances: a profile's parent model and placement are Cardinal's;
//   - a pod group (Kueue's pod-group label): its plan places every member on the nodes
//     kube-scheduler found feasible for one of them.
//
// Any other GPU pod asks only for whole cards of any model, which kube-scheduler's NodeResourcesFit
// counts on each node as the device plugin advertises them.
func NeedsFullScan(pod *corev1.Pod, names annotations.ResourceNames) bool {
	a := pod.Annotations
	for _, k := range []string{annotations.UseGPUType, annotations.NoUseGPUType, annotations.UseGPUUUID, annotations.NoUseGPUUUID, annotations.GPULink} {
		if strings.TrimSpace(a[k]) != "" {
			return true
		}
	}
	if strings.EqualFold(strings.TrimSpace(a[annotations.NUMABind]), "true") {
		return true
	}
	if _, ok := pod.Labels[annotations.PodGroupName]; ok {
		return true
	}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			for _, l := range []corev1.ResourceList{cs[i].Resources.Limits, cs[i].Resources.Requests} {
				for name := range l {
					switch {
					case name == names.Mem, name == names.MemPercentage, name == names.Cores,
						name == annotations.ResourceMIGRoute, names.IsMIGResource(name):
						return true
					}
				}
			}
		}
	}
	return false
}

// Default mutates a GPU pod being created: it names Cardinal's scheduler, and gives every container
// that asks for a share of a card (memory or cores) without a card count one card. It reports whether
// it changed the pod, and a warning for each card count it added. Pods without GPU requests, pods
// naming another scheduler and mirror pods are left alone. A container that asks for MIG instances
// gets the marker annotations.ResourceMIGRoute: 0, so that kube-scheduler calls Cardinal's extender
// for the pod (its managedResources are exact names; no list of MIG profiles made in advance would
// hold every card's). It adds GPUTolerations the pod lacks.
func (r *Rules) Default(pod *corev1.Pod) (changed bool, warnings []string) {
	if !r.IsGPUPod(pod) || !r.placedByCardinal(pod) {
		return false, nil
	}
	if want := r.profileFor(pod); pod.Spec.SchedulerName != want {
		pod.Spec.SchedulerName = want
		changed = true
	}
	if addTolerations(pod, r.GPUTolerations) {
		changed = true
	}
	setCount := func(c *corev1.Container, name corev1.ResourceName, n string) {
		q := resource.MustParse(n)
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		c.Resources.Limits[name] = q
		if c.Resources.Requests != nil {
			c.Resources.Requests[name] = q
		}
		changed = true
	}
	add := func(c *corev1.Container) {
		if r.hasMIG(c) {
			if !hasResource(c, annotations.ResourceMIGRoute) {
				setCount(c, annotations.ResourceMIGRoute, "0")
			}
			return
		}
		if hasResource(c, r.Resources.GPU) {
			return
		}
		if !hasResource(c, r.Resources.Mem) && !hasResource(c, r.Resources.MemPercentage) && !hasResource(c, r.Resources.Cores) {
			return
		}
		setCount(c, r.Resources.GPU, "1")
		warnings = append(warnings, fmt.Sprintf("container %q asks for a share of a card without %s: Cardinal added %s: 1 (one card)",
			c.Name, r.Resources.GPU, r.Resources.GPU))
	}
	for i := range pod.Spec.InitContainers {
		add(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		add(&pod.Spec.Containers[i])
	}
	return changed, warnings
}

func hasResource(c *corev1.Container, name corev1.ResourceName) bool {
	_, inLimits := c.Resources.Limits[name]
	_, inRequests := c.Resources.Requests[name]
	return inLimits || inRequests
}

// migResource returns a MIG resource the container names in its limits or requests (the first by
// name), or "".
func (r *Rules) migResource(c *corev1.Container) corev1.ResourceName {
	var found corev1.ResourceName
	for _, l := range []corev1.ResourceList{c.Resources.Limits, c.Resources.Requests} {
		for name := range l {
			if r.Resources.IsMIGResource(name) && (found == "" || name < found) {
				found = name
			}
		}
	}
	return found
}

func (r *Rules) hasMIG(c *corev1.Container) bool { return r.migResource(c) != "" }

// requested names what a GPU pod asks for, for messages: the GPU resource, unless the pod asks only
// for MIG instances (then the first MIG resource of its first container that names one; such a
// container's nvidia.com/gpu, 0 after Default, is no card).
func (r *Rules) requested(pod *corev1.Pod) corev1.ResourceName {
	var mig corev1.ResourceName
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if m := r.migResource(&cs[i]); m != "" {
				if mig == "" {
					mig = m
				}
				continue
			}
			for _, n := range r.Resources.All() {
				if hasResource(&cs[i], n) {
					return r.Resources.GPU
				}
			}
		}
	}
	if mig != "" {
		return mig
	}
	return r.Resources.GPU
}

// ValidateCreate decides whether a pod being created (after Default) by user is admitted. A refusal is
// a *Denial listing every problem found; warnings are for things that are allowed but will probably
// not do what the user wants. cards is what Cardinal knows of the cluster; nil or empty means nothing,
// and then no rule that needs cards applies.
func (r *Rules) ValidateCreate(pod *corev1.Pod, cards *Cards, user authenticationv1.UserInfo) (warnings []string, err error) {
	var ds denials
	for _, k := range internalKeys(pod.Annotations) {
		ds.add(ReasonInternalAnnotation, fmt.Errorf("metadata.annotations: %s is written only by Cardinal (its scheduler extender and device plugin); remove it from the pod", k))
	}
	if !r.deviceEnvAllowed(pod.Namespace) {
		ds.add(ReasonDeviceEnv, errors.Join(deviceEnvRefusals(&pod.Spec)...))
	}
	if !r.IsGPUPod(pod) {
		return nil, ds.err()
	}
	// Only a kubelet creates mirror pods (of the static pods it runs); a mirror pod skips the rules
	// below, and with spec.nodeName it would hold cards no scheduler counted until the kubelet
	// deletes it.
	_, mirror := pod.Annotations[corev1.MirrorPodAnnotationKey]
	if mirror && !isNode(user) {
		ds.add(ReasonMirrorPod, fmt.Errorf("metadata.annotations: %s marks a mirror pod, which only a kubelet creates (user system:node:<node>), not %q; remove it from the pod",
			corev1.MirrorPodAnnotationKey, user.Username))
	}
	// A GPU pod created on a node skips every scheduler, and the device plugin would serve it cards no
	// scheduler counted: refused whichever scheduler it names (a mirror pod is the kubelet's own).
	if !mirror && pod.Spec.NodeName != "" {
		if r.placedByCardinal(pod) {
			ds.add(ReasonNodeName, fmt.Errorf("spec.nodeName: %q is set, which would bypass card selection: a pod requesting %s is placed by %s, which picks its node and its cards; remove spec.nodeName and pin the node with spec.nodeSelector (%s: %s) instead",
				pod.Spec.NodeName, r.requested(pod), r.SchedulerName, corev1.LabelHostname, pod.Spec.NodeName))
		} else {
			ds.add(ReasonNodeName, fmt.Errorf("spec.nodeName: %q is set, which would bypass scheduling: a pod requesting %s must be bound by its scheduler (%q), so that its cards are counted before it runs; remove spec.nodeName and pin the node with spec.nodeSelector (%s: %s) instead",
				pod.Spec.NodeName, r.requested(pod), pod.Spec.SchedulerName, corev1.LabelHostname, pod.Spec.NodeName))
		}
	}
	if !r.placedByCardinal(pod) {
		return nil, ds.err()
	}
	ds.add(ReasonHostMarker, errors.Join(r.hostMarkerRefusals(pod)...))
	req, reqErr := annotations.ParsePodRequest(pod, r.Resources)
	ds.add(ReasonInvalidRequest, reqErr)
	sel, selErr := annotations.ParseSelector(pod.Annotations)
	ds.add(ReasonInvalidSelector, selErr)
	if cards.Known() {
		for i := range req.Containers {
			c := &req.Containers[i]
			if c.MemoryMiB > cards.MaxMemoryMiB() {
				ds.add(ReasonMemoryTooLarge, &annotations.Error{Container: c.Name, Key: string(r.Resources.Mem),
					Reason: fmt.Sprintf("%d MiB is more than the largest card Cardinal knows holds (%d MiB, %s)",
						c.MemoryMiB, cards.MaxMemoryMiB(), cards.MaxMemoryModel())})
			}
		}
	}
	if err := ds.err(); err != nil {
		return nil, err
	}
	warnings = append(warnings, r.privilegedWarnings(pod)...)
	if cards.Known() {
		warnings = append(warnings, r.cardWarnings(&req, &sel, cards)...)
	}
	return warnings, nil
}

// privilegedWarnings: a privileged container sees every card of its node, whatever Cardinal assigns.
func (r *Rules) privilegedWarnings(pod *corev1.Pod) []string {
	var out []string
	check := func(c *corev1.Container) {
		sc := c.SecurityContext
		if sc == nil || sc.Privileged == nil || !*sc.Privileged {
			return
		}
		if !hasResource(c, r.Resources.GPU) && !r.hasMIG(c) {
			return
		}
		out = append(out, fmt.Sprintf("container %q is privileged: it can see and use every GPU on its node, not only the cards Cardinal assigns it", c.Name))
	}
	for i := range pod.Spec.InitContainers {
		check(&pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		check(&pod.Spec.Containers[i])
	}
	return out
}

// cardWarnings says when no card Cardinal knows can satisfy the pod. Such a pod is admitted (a node
// with the right cards may join later) and stays Pending until then. A container asking for MIG
// instances is checked against the known instances of its profile instead of cards.
func (r *Rules) cardWarnings(req *annotations.PodRequest, sel *annotations.Selector, cards *Cards) []string {
	wholeCards := slices.ContainsFunc(req.Containers, func(c annotations.ContainerRequest) bool { return !c.MIG() })
	if wholeCards && sel.HasCardConstraint() && !cards.Fits(sel, 0) {
		return []string{fmt.Sprintf("no card Cardinal knows matches %s (known: %s); the pod stays Pending until such a card joins",
			sel.String(), cards.Summary())}
	}
	var out []string
	for i := range req.Containers {
		c := &req.Containers[i]
		if c.MIG() {
			out = append(out, r.migWarnings(c, sel, cards)...)
			continue
		}
		if c.MemoryMiB > 0 && !cards.Fits(sel, c.MemoryMiB) {
			out = append(out, fmt.Sprintf("container %q: %s: no card Cardinal knows that matches %s has %d MiB; the pod stays Pending until one joins",
				c.Name, r.Resources.Mem, sel.String(), c.MemoryMiB))
		}
		if c.Count > cards.MaxPerNode() {
			out = append(out, fmt.Sprintf("container %q: %s: %d is more cards than any node Cardinal knows has (at most %d); the pod stays Pending until such a node joins",
				c.Name, r.Resources.GPU, c.Count, cards.MaxPerNode()))
		}
	}
	return out
}

// migWarnings says when no MIG instance Cardinal knows can serve a container asking for instances.
func (r *Rules) migWarnings(c *annotations.ContainerRequest, sel *annotations.Selector, cards *Cards) []string {
	name := r.Resources.MIGResource(c.MIGProfile)
	if !cards.FitsMIG(sel, c.MIGProfile) {
		matching := ""
		if sel.HasCardConstraint() {
			matching = " that matches " + sel.String()
		}
		return []string{fmt.Sprintf("container %q: %s: no %s instance Cardinal knows%s (known: %s); the pod stays Pending until one joins",
			c.Name, name, c.MIGProfile, matching, cards.MIGSummary())}
	}
	if most := cards.MaxInstancesPerNode(c.MIGProfile); c.Count > most {
		return []string{fmt.Sprintf("container %q: %s: %d is more %s instances than any node Cardinal knows has (at most %d); the pod stays Pending until such a node joins",
			c.Name, name, c.Count, c.MIGProfile, most)}
	}
	return nil
}

// ValidateUpdate decides whether an update of a pod (through pods, pods/status or
// pods/ephemeralcontainers) is admitted. Only TrustedUsers may add, change or remove Cardinal's
// internal annotations; a selector annotation changed on a GPU pod Cardinal places must still parse;
// an ephemeral container added may not set a device variable.
func (r *Rules) ValidateUpdate(old, pod *corev1.Pod, username string) (warnings []string, err error) {
	var ds denials
	if !slices.Contains(r.TrustedUsers, username) {
		for _, k := range annotations.InternalKeys {
			ov, inOld := old.Annotations[k]
			nv, inNew := pod.Annotations[k]
			if inOld == inNew && ov == nv {
				continue
			}
			ds.add(ReasonInternalAnnotation, fmt.Errorf("metadata.annotations: %s is written only by Cardinal (its scheduler extender and device plugin); %q may not %s it",
				k, username, verb(inOld, inNew)))
		}
	}
	if r.IsGPUPod(pod) && r.placedByCardinal(pod) && userKeysChanged(old, pod) {
		_, selErr := annotations.ParseSelector(pod.Annotations)
		ds.add(ReasonInvalidSelector, selErr)
	}
	if added := addedEphemeral(old, pod); len(added) > 0 && !r.deviceEnvAllowed(pod.Namespace) {
		ds.add(ReasonDeviceEnv, errors.Join(deviceEnvRefusals(&corev1.PodSpec{EphemeralContainers: added})...))
	}
	return nil, ds.err()
}

// addedEphemeral lists the ephemeral containers pod has and old had not (kubectl debug adds them).
func addedEphemeral(old, pod *corev1.Pod) []corev1.EphemeralContainer {
	var out []corev1.EphemeralContainer
	for _, c := range pod.Spec.EphemeralContainers {
		if !slices.ContainsFunc(old.Spec.EphemeralContainers, func(o corev1.EphemeralContainer) bool { return o.Name == c.Name }) {
			out = append(out, c)
		}
	}
	return out
}

func verb(inOld, inNew bool) string {
	switch {
	case !inOld:
		return "add"
	case !inNew:
		return "remove"
	}
	return "change"
}

func userKeysChanged(old, pod *corev1.Pod) bool {
	for _, k := range annotations.UserKeys {
		ov, inOld := old.Annotations[k]
		nv, inNew := pod.Annotations[k]
		if inOld != inNew || ov != nv {
			return true
		}
	}
	return false
}

// internalKeys lists the internal annotation keys present, in annotations.InternalKeys order.
func internalKeys(ann map[string]string) []string {
	var out []string
	for _, k := range annotations.InternalKeys {
		if _, ok := ann[k]; ok {
			out = append(out, k)
		}
	}
	return out
}

// IsDenial reports whether err is a refusal by the rules (and not a failure to decide).
func IsDenial(err error) (*Denial, bool) {
	var d *Denial
	ok := errors.As(err, &d)
	return d, ok
}
