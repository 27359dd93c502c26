package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// GPU nodes can be tainted so that pods without GPUs stay off them (see
// docs/cpu-only-pods.md); GPU pods then need the toleration. Rules.GPUTolerations (--gpu-pod-tolerations, the
// chart's webhook.gpuPodTolerations) are added by Default to every GPU pod Cardinal places, whatever
// it requests: the API server's ExtendedResourceToleration plugin, which runs before webhooks,
// tolerates a taint keyed by each resource a pod names, so a pod asking only nvidia.com/gpumem or a
// MIG resource would not tolerate a taint keyed nvidia.com/gpu.

// ParseTolerations reads --gpu-pod-tolerations: a JSON list of Kubernetes tolerations, e.g.
// [{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]. Empty means none. Each
// toleration must be one the API server accepts; the error names the entry, the field and the value.
func ParseTolerations(s string) ([]corev1.Toleration, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var ts []corev1.Toleration
	if err := dec.Decode(&ts); err != nil {
		return nil, fmt.Errorf("not a JSON list of tolerations ({key, operator, value, effect, tolerationSeconds}): %w", err)
	}
	if dec.More() {
		return nil, errors.New("not a JSON list of tolerations: text after the list")
	}
	var errs []error
	for i := range ts {
		if err := validToleration(&ts[i]); err != nil {
			errs = append(errs, fmt.Errorf("[%d]: %w", i, err))
		}
	}
	return ts, errors.Join(errs...)
}

// validToleration applies the API server's rules for a pod's toleration.
func validToleration(t *corev1.Toleration) error {
	if t.Key != "" {
		if errs := validation.IsQualifiedName(t.Key); len(errs) > 0 {
			return fmt.Errorf("key %q: %s", t.Key, strings.Join(errs, "; "))
		}
	}
	switch t.Operator {
	case corev1.TolerationOpExists:
		if t.Value != "" {
			return fmt.Errorf("value %q: must be empty with operator Exists", t.Value)
		}
	case corev1.TolerationOpEqual, "":
		if t.Key == "" {
			return fmt.Errorf("operator %q: an empty key needs operator Exists", t.Operator)
		}
		if errs := validation.IsValidLabelValue(t.Value); len(errs) > 0 {
			return fmt.Errorf("value %q: %s", t.Value, strings.Join(errs, "; "))
		}
	default:
		return fmt.Errorf("operator %q: not Exists or Equal", t.Operator)
	}
	switch t.Effect {
	case "", corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
	default:
		return fmt.Errorf("effect %q: not NoSchedule, PreferNoSchedule or NoExecute", t.Effect)
	}
	if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
		return fmt.Errorf("tolerationSeconds: only with effect NoExecute, not %q", t.Effect)
	}
	return nil
}

// addTolerations adds each of ts that pod does not carry already; it reports whether it added one.
func addTolerations(pod *corev1.Pod, ts []corev1.Toleration) bool {
	changed := false
	for i := range ts {
		if slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool { return t.MatchToleration(&ts[i]) }) {
			continue
		}
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, ts[i])
		changed = true
	}
	return changed
}
