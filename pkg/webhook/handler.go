package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// Path is where the webhook server serves pod admission.
const Path = "/mutate-pods"

// Handler adapts Rules to controller-runtime's admission.Handler: the framework decodes the
// AdmissionReview and encodes the response; Handler decodes the pods, asks the rules, and turns a
// mutation into a JSON patch.
type Handler struct {
	rules   *Rules
	cards   CardSource
	metrics *Metrics
	decoder admission.Decoder
}

var _ admission.Handler = (*Handler)(nil)

// NewHandler builds a Handler. metrics may be nil.
func NewHandler(rules *Rules, cards CardSource, metrics *Metrics) *Handler {
	return &Handler{rules: rules, cards: cards, metrics: metrics, decoder: coreDecoder()}
}

// Webhook wraps the handler in controller-runtime's admission.Webhook, whose per-request logger
// comes from log.
func (h *Handler) Webhook(log logr.Logger) *admission.Webhook {
	return newWebhook(h, log, func(req *admission.Request) logr.Logger {
		return log.WithValues(logging.KeyPod, req.Namespace+"/"+req.Name)
	})
}

// podVerdicts are the pod handler's log messages.
var podVerdicts = verdictMessages{refused: "Refused a pod", failed: "Could not decide on a pod", admitted: "Admitted a pod"}

// Handle decides one admission request.
func (h *Handler) Handle(ctx context.Context, req admission.Request) admission.Response {
	return decideAndLog(ctx, req, h.metrics, podVerdicts, h.handle)
}

func (h *Handler) handle(req admission.Request) (admission.Response, Outcome, Reason) {
	switch req.Operation {
	case admissionv1.Create:
		return h.create(req)
	case admissionv1.Update:
		return h.update(req)
	}
	return admission.Allowed(""), OutcomeAllowed, ""
}

func (h *Handler) create(req admission.Request) (admission.Response, Outcome, Reason) {
	pod := &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err)), OutcomeError, ""
	}
	if pod.Namespace == "" {
		pod.Namespace = req.Namespace // a pod created without metadata.namespace takes the request's
	}
	var original *corev1.Pod
	if h.rules.IsGPUPod(pod) {
		original = pod.DeepCopy()
	}
	changed, warnings := h.rules.Default(pod)
	more, err := h.rules.ValidateCreate(pod, h.cards.Cards(), req.UserInfo)
	if err != nil {
		return h.denied(err)
	}
	warnings = append(warnings, more...)
	if !changed {
		return admission.Allowed("").WithWarnings(warnings...), OutcomeAllowed, ""
	}
	resp, err := podPatch(original, pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err), OutcomeError, ""
	}
	return resp.WithWarnings(warnings...), OutcomeMutated, ""
}

// podPatch is the JSON patch from original to pod. It diffs two renderings of the same Go type, so
// the patch holds only what the handler changed and never removes a field the request carried in
// another form.
func podPatch(original, pod *corev1.Pod) (admission.Response, error) {
	before, err := json.Marshal(original)
	if err != nil {
		return admission.Response{}, err
	}
	after, err := json.Marshal(pod)
	if err != nil {
		return admission.Response{}, err
	}
	return admission.PatchResponseFromRaw(before, after), nil
}

func (h *Handler) update(req admission.Request) (admission.Response, Outcome, Reason) {
	pod, old := &corev1.Pod{}, &corev1.Pod{}
	if err := h.decoder.Decode(req, pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err)), OutcomeError, ""
	}
	if err := h.decoder.DecodeRaw(req.OldObject, old); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the old pod: %w", err)), OutcomeError, ""
	}
	warnings, err := h.rules.ValidateUpdate(old, pod, req.UserInfo.Username)
	if err != nil {
		return h.denied(err)
	}
	return admission.Allowed("").WithWarnings(warnings...), OutcomeAllowed, ""
}

func (h *Handler) denied(err error) (admission.Response, Outcome, Reason) {
	d, ok := IsDenial(err)
	if !ok {
		return admission.Errored(http.StatusInternalServerError, err), OutcomeError, ""
	}
	return admission.Denied(d.Error()), OutcomeDenied, d.Reason
}

// coreDecoder decodes the built-in types the handlers admit (pods, Bindings).
func coreDecoder() admission.Decoder {
	scheme := runtime.NewScheme()
	// Registering a built-in type only fails on a programming error.
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(fmt.Sprintf("registering built-in types: %v", err))
	}
	return admission.NewDecoder(scheme)
}
