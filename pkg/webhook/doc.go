// Package webhook is Cardinal's mutating admission webhook for pods: the door through which GPU pods
// reach Cardinal.
//
// The decisions are pure functions over *corev1.Pod (Rules.Default, Rules.ValidateCreate,
// Rules.ValidateUpdate) and a read-only view of the cards Cardinal knows (Cards). Handler glues them to
// controller-runtime's admission machinery, which decodes the AdmissionReview and computes the JSON
// patch; Run serves it over TLS, next to health and metrics endpoints, with a certificate either read
// from files (reloaded when they change) or managed by the webhook itself (package certs: its own CA in
// a Secret, put into the configurations' caBundle, rotated while it runs).
//
// MutatingWebhookConfiguration returns the configuration the webhook expects to be registered with;
// testdata/mutatingwebhookconfiguration.yaml is its rendering for the chart.
package webhook
