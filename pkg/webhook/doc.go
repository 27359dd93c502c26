// Package webhook is Cardinal's mutating admission webhook for pods: the door through which GPU pods
// reach Cardinal.
//
// The decisions are pure functions over *corev1.Pod (Rules.Default, Rules.ValidateCreate,
// Rules.ValidateUpdate) and a read-only view of the cards Cardinal knows (Cards). Handler glues them to
// controller-runtime's admission machinery, which decodes the AdmissionReview and computes the JSON
// patch; Run serves it over TLS with certificate reload, next to health and metrics endpoints.
//
// MutatingWebhookConfiguration returns the configuration the webhook expects to be registered with;
// testdata/mutatingwebhookconfiguration.yaml is its rendering for the chart.
package webhook
