package webhook

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/cardinal-gpu/cardinal/pkg/logging"
)

// newWebhook wraps a handler in controller-runtime's admission.Webhook, with a per-request logger
// that names the object (named) and the request's operation, user and UID.
func newWebhook(h admission.Handler, log logr.Logger, named func(*admission.Request) logr.Logger) *admission.Webhook {
	return &admission.Webhook{
		Handler: h,
		LogConstructor: func(_ logr.Logger, req *admission.Request) logr.Logger {
			if req == nil {
				return log
			}
			return named(req).WithValues("operation", req.Operation, "user", req.UserInfo.Username, "uid", req.UID)
		},
	}
}

// verdictMessages are a handler's constant log messages.
type verdictMessages struct{ refused, failed, admitted string }

// decideAndLog is Handle for both handlers: it decides the request with decide, counts the outcome and
// logs refusals and errors (admissions at V(1)).
func decideAndLog(ctx context.Context, req admission.Request, m *Metrics, msgs verdictMessages,
	decide func(admission.Request) (admission.Response, Outcome, Reason)) admission.Response {
	start := time.Now()
	resp, outcome, reason := decide(req)
	took := time.Since(start)
	if m != nil {
		m.observe(req.Operation, outcome, reason, took)
	}
	log := logr.FromContextOrDiscard(ctx)
	switch outcome {
	case OutcomeDenied:
		log.Info(msgs.refused, logging.KeyReason, reason, "message", resp.Result.Message)
	case OutcomeError:
		log.Error(fmt.Errorf("%s", resp.Result.Message), msgs.failed)
	default:
		if v := log.V(1); v.Enabled() {
			v.Info(msgs.admitted, "outcome", outcome, "warnings", resp.Warnings, logging.KeyDuration, took)
		}
	}
	return resp
}
