package scheduler

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// The filter shortlist (Config.FilterShortlist). kube-scheduler runs its score plugins over every
// feasible node and sends them all to prioritize, except when exactly one node is feasible: then it
// takes that node and skips scoring (schedule_one.go, schedulePod). Filter already decides and
// scores every named node, so when nothing kube-scheduler scores itself could change the pick, it
// may answer only the nodes its policy ranks best: the best node and those tied with it, at most
// FilterShortlist of them (ties broken by node name, lowest first).
//
// kube-scheduler's own scores count only when they differ between feasible nodes. With the chart's
// profile (NodeResourcesFit and BalancedAllocation scores off) the default score plugins that can
// differ are listed by fullReason; a pod for which any of them holds gets the full list.

// fullReason says why a pod gets the full list of fitting nodes instead of the shortlist.
type fullReason uint8

const (
	// shortlisted: nothing kube-scheduler scores differs between the candidates.
	shortlisted fullReason = iota
	// fullPodAffinity: the pod has preferred pod affinity or anti-affinity (InterPodAffinity).
	fullPodAffinity
	// fullExistingAffinity: a pod in the cluster has a pod affinity term (required or preferred
	// affinity, preferred anti-affinity) that selects this pod; InterPodAffinity scores it.
	fullExistingAffinity
	// fullTopologySpread: a ScheduleAnyway topology spread constraint (PodTopologySpread).
	fullTopologySpread
	// fullDefaultSpread: no constraints of its own, but a Service, ReplicaSet, ReplicationController
	// or StatefulSet selects the pod, so PodTopologySpread applies its system default constraints.
	fullDefaultSpread
	// fullTaints: the candidates differ in the PreferNoSchedule taints the pod does not tolerate
	// (TaintToleration).
	fullTaints
	// fullImages: a candidate already has one of the pod's images (ImageLocality).
	fullImages
)

// String is the reason's metrics label.
func (r fullReason) String() string {
	return [...]string{"shortlist", "pod_affinity", "existing_affinity", "topology_spread", "default_spread", "taints", "images"}[r]
}

// ServiceSelects reports whether a Service in the pod's namespace selects the pod.
type ServiceSelects func(pod *corev1.Pod) bool

// podFullReason checks what of the pod alone makes kube-scheduler's scores differ between nodes.
func podFullReason(pod *corev1.Pod, services ServiceSelects) fullReason {
	if a := pod.Spec.Affinity; a != nil {
		if (a.PodAffinity != nil && len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0) ||
			(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) > 0) {
			return fullPodAffinity
		}
	}
	for i := range pod.Spec.TopologySpreadConstraints {
		if pod.Spec.TopologySpreadConstraints[i].WhenUnsatisfiable == corev1.ScheduleAnyway {
			return fullTopologySpread
		}
	}
	if len(pod.Spec.TopologySpreadConstraints) == 0 && (spreadOwner(pod) || (services != nil && services(pod))) {
		return fullDefaultSpread
	}
	return shortlisted
}

// spreadOwner reports whether the pod's controller is of a kind whose selector PodTopologySpread's
// system default constraints spread (helper.DefaultSelector).
func spreadOwner(pod *corev1.Pod) bool {
	owner := metav1.GetControllerOfNoCopy(pod)
	if owner == nil {
		return false
	}
	switch {
	case owner.APIVersion == "v1" && owner.Kind == "ReplicationController":
		return true
	case owner.APIVersion == "apps/v1" && (owner.Kind == "ReplicaSet" || owner.Kind == "StatefulSet"):
		return true
	}
	return false
}

// affinityTerm is a pod affinity term of a pod in the cluster that InterPodAffinity scores incoming
// pods against.
type affinityTerm struct {
	// namespaces the term selects pods in; nil with anyNamespace for a namespaceSelector (which
	// the cache cannot evaluate, so it counts as matching every namespace).
	namespaces   []string
	anyNamespace bool
	selector     labels.Selector
}

// affinityTermsOf returns the terms of a pod that score other pods: required and preferred pod
// affinity, preferred anti-affinity (required anti-affinity only filters). nil for most pods.
func affinityTermsOf(pod *corev1.Pod) []affinityTerm {
	a := pod.Spec.Affinity
	if a == nil || finished(pod) {
		return nil
	}
	var terms []affinityTerm
	add := func(t *corev1.PodAffinityTerm) {
		at := affinityTerm{namespaces: t.Namespaces, anyNamespace: t.NamespaceSelector != nil}
		if !at.anyNamespace && len(at.namespaces) == 0 {
			at.namespaces = []string{pod.Namespace}
		}
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil {
			sel = labels.Everything() // the API server validated it; count it as matching
		}
		at.selector = sel
		terms = append(terms, at)
	}
	if a.PodAffinity != nil {
		for i := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			add(&a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution[i])
		}
		for i := range a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			add(&a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	if a.PodAntiAffinity != nil {
		for i := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			add(&a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	return terms
}

func (t *affinityTerm) matches(pod *corev1.Pod) bool {
	if !t.anyNamespace && !slices.Contains(t.namespaces, pod.Namespace) {
		return false
	}
	return t.selector.Matches(labels.Set(pod.Labels))
}

// setAffinityTerms records (or, with none, forgets) a pod's affinity terms; under c.mu.
func (c *Cache) setAffinityTerms(uid types.UID, terms []affinityTerm) {
	if len(terms) == 0 {
		delete(c.affinity, uid)
		return
	}
	c.affinity[uid] = terms
}

// softNode is what of a node kube-scheduler's score plugins read besides what the extender decides
// on: its PreferNoSchedule taints and its images. nil for most nodes.
type softNode struct {
	taints []corev1.Taint
	images map[string]struct{}
}

// setSoft replaces a node's soft entry, keeping softNodes; under c.mu.
func (c *Cache) setSoft(n *nodeEntry, s *softNode) {
	if n.soft != nil {
		c.softNodes--
	}
	if s != nil {
		c.softNodes++
	}
	n.soft = s
}

// softNodeOf keeps the PreferNoSchedule taints and the image names (as ImageLocality normalises
// them) of a node; nil when it has neither.
func softNodeOf(node *corev1.Node) *softNode {
	var s softNode
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			s.taints = append(s.taints, t)
		}
	}
	for _, img := range node.Status.Images {
		for _, name := range img.Names {
			if s.images == nil {
				s.images = map[string]struct{}{}
			}
			s.images[normalizedImage(name)] = struct{}{}
		}
	}
	if s.taints == nil && s.images == nil {
		return nil
	}
	return &s
}

// normalizedImage is ImageLocality's normalizedImageName: a name without a tag gets ":latest".
func normalizedImage(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		return name + ":latest"
	}
	return name
}

// intolerable counts the node's PreferNoSchedule taints that none of tolerations tolerates
// (TaintToleration's score).
func (s *softNode) intolerable(tolerations []corev1.Toleration) int {
	if s == nil {
		return 0
	}
	n := 0
	for i := range s.taints {
		tolerated := false
		for j := range tolerations {
			t := &tolerations[j]
			if (t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule) && t.ToleratesTaint(klog.Background(), &s.taints[i], false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			n++
		}
	}
	return n
}

// clusterFullReason checks what of the cluster makes kube-scheduler's scores of the pod differ
// between the named candidate nodes: other pods' affinity terms that select it, PreferNoSchedule
// taints it does not tolerate on some candidates and not others, and its images on a candidate.
func (c *Cache) clusterFullReason(pod *corev1.Pod, names []string) fullReason {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, terms := range c.affinity {
		for i := range terms {
			if terms[i].matches(pod) {
				return fullExistingAffinity
			}
		}
	}
	if c.softNodes == 0 {
		return shortlisted
	}
	var images []string
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Image != "" {
				images = append(images, normalizedImage(list[i].Image))
			}
		}
	}
	taints := -1
	for _, name := range names {
		n, ok := c.nodes[name]
		if !ok {
			continue
		}
		k := n.soft.intolerable(pod.Spec.Tolerations)
		if taints >= 0 && k != taints {
			return fullTaints
		}
		taints = k
		if n.soft != nil && n.soft.images != nil {
			for _, img := range images {
				if _, has := n.soft.images[img]; has {
					return fullImages
				}
			}
		}
	}
	return shortlisted
}

// shortlist keeps, of the fitting candidates fit (indexes into names, with scores), the best-scored
// one and those tied with it, at most limit of them, lowest node name first among ties. It returns
// fit itself when it is no longer than limit.
func shortlist(names []string, fit []int, scores []float64, limit int) []int {
	if len(fit) <= limit {
		return fit
	}
	best := scores[0]
	for _, s := range scores[1:] {
		if s > best {
			best = s
		}
	}
	var top []int
	for k, i := range fit {
		if scores[k] == best {
			top = append(top, i)
		}
	}
	if len(top) > limit {
		top = lowestNames(names, top, limit)
	}
	return top
}

// lowestNames returns the limit entries of top whose names are lowest, in name order. Nodes in one
// state tie, so top is often most of a sample (hundreds) while limit is 1: the few kept are found in
// one pass instead of sorting them all.
func lowestNames(names []string, top []int, limit int) []int {
	byName := func(a, b int) int { return strings.Compare(names[a], names[b]) }
	if limit > 16 {
		slices.SortFunc(top, byName)
		return top[:limit]
	}
	kept := make([]int, 0, limit)
	for _, i := range top {
		if len(kept) == limit && byName(i, kept[limit-1]) >= 0 {
			continue
		}
		at, _ := slices.BinarySearchFunc(kept, i, byName)
		if len(kept) == limit {
			kept = kept[:limit-1]
		}
		kept = slices.Insert(kept, at, i)
	}
	return kept
}
