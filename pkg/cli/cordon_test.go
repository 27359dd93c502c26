package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
)

// cordonCluster is the fixture on a fake API server that knows its user ("ops") and answers
// evictions: a pod named keep is protected by a budget (429), others are deleted.
func cordonCluster(t *testing.T) *fake.Clientset {
	t.Helper()
	objs := fixture(t)
	objs = append(objs, holder(t, "ml", "keep", "gpu-a", "main", annotations.DeviceAssignment{UUID: "GPU-a1", ID: "GPU-a1"}))
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{Username: "ops"}}}, nil
	})
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		if name == "keep" {
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		return true, nil, cs.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, a.GetNamespace(), name)
	})
	return cs
}

func runOn(cs kubernetes.Interface, args ...string) (stdout, stderr string, code int) {
	client := func(string, string) (kubernetes.Interface, string, error) { return cs, "default", nil }
	var out, errOut bytes.Buffer
	code = Main(context.Background(), args, &out, &errOut, client)
	return out.String(), errOut.String(), code
}

func TestCordonDrainUncordon(t *testing.T) {
	cs := cordonCluster(t)
	ctx := context.Background()

	// cordon: the mark names the reason and the user; the pod on the card is listed and stays.
	out, errOut, code := runOn(cs, "cordon", "gpu-a", "0", "--reason", "correctable ECC errors", "-o", "json")
	if code != 0 {
		t.Fatalf("cordon: exit %d: %s", code, errOut)
	}
	var res []CordonResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if len(res) != 1 || res[0].UUID != "GPU-a0" || res[0].Action != "cordoned" || res[0].By != "ops" || len(res[0].Holders) != 1 || res[0].Holders[0].Pod != "ml/train" {
		t.Errorf("cordon result %+v", res)
	}
	n, _ := cs.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	if got := n.Annotations[annotations.CordonKey("GPU-a0")]; got != `{"reason":"correctable ECC errors","by":"ops"}` {
		t.Errorf("mark %q", got)
	}

	// cards and nodes show it.
	out, _, _ = runOn(cs, "cards", "gpu-a")
	if !strings.Contains(out, "cordoned: correctable ECC errors (by ops)") {
		t.Errorf("cards gpu-a does not show the cordon:\n%s", out)
	}
	out, _, _ = runOn(cs, "nodes", "-o", "json")
	var nodes []NodeSummary
	if err := json.Unmarshal([]byte(out), &nodes); err != nil {
		t.Fatal(err)
	}
	for _, s := range nodes {
		if s.Name == "gpu-a" && (s.Cordoned != 1 || s.FreeWhole != 0) {
			t.Errorf("gpu-a: cordoned %d, free %d; want 1 and 0 (card 0 cordoned, card 1 held)", s.Cordoned, s.FreeWhole)
		}
	}

	// drain refuses a card that is not cordoned; a dry run evicts nothing.
	if _, errOut, code := runOn(cs, "drain", "gpu-a", "1"); code == 0 || !strings.Contains(errOut, "card 1 (GPU-a1) of node gpu-a is not cordoned") {
		t.Errorf("drain of an uncordoned card: exit %d: %s", code, errOut)
	}
	out, _, code = runOn(cs, "drain", "gpu-a", "0", "--dry-run")
	if code != 0 || !strings.Contains(out, "would-evict") {
		t.Errorf("drain --dry-run: exit %d:\n%s", code, out)
	}
	if _, err := cs.CoreV1().Pods("ml").Get(ctx, "train", metav1.GetOptions{}); err != nil {
		t.Errorf("a dry run evicted ml/train: %v", err)
	}

	// drain: the pod goes; a budget-protected one stays, reported, and the exit code says so.
	if _, errOut, code := runOn(cs, "drain", "gpu-a", "0", "--timeout", "1s"); code != 0 {
		t.Errorf("drain: exit %d: %s", code, errOut)
	}
	if _, err := cs.CoreV1().Pods("ml").Get(ctx, "train", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ml/train after drain: %v, want gone", err)
	}
	runOn(cs, "cordon", "gpu-a", "GPU-a1", "--reason", "reseat")
	out, errOut, code = runOn(cs, "drain", "gpu-a", "1", "--timeout", "1s")
	if code == 0 || !strings.Contains(out, "not drained") || !strings.Contains(out, "stayed: Cannot evict pod as it would violate the pod's disruption budget") || !strings.Contains(errOut, "ml/keep") {
		t.Errorf("drain of a protected pod: exit %d:\n%s\n%s", code, out, errOut)
	}

	// uncordon returns both.
	if _, errOut, code := runOn(cs, "uncordon", "gpu-a", "0", "1"); code != 0 {
		t.Fatalf("uncordon: exit %d: %s", code, errOut)
	}
	n, _ = cs.CoreV1().Nodes().Get(ctx, "gpu-a", metav1.GetOptions{})
	for k := range n.Annotations {
		if strings.HasPrefix(k, annotations.CordonPrefix) {
			t.Errorf("after uncordon the node still has %s", k)
		}
	}
	if _, errOut, code := runOn(cs, "cordon", "gpu-a", "7", "--reason", "x"); code == 0 || !strings.Contains(errOut, `node "gpu-a" has no card "7"`) {
		t.Errorf("cordon of a card the node does not have: exit %d: %s", code, errOut)
	}
	if _, errOut, code := runOn(cs, "cordon", "gpu-a", "0"); code == 0 || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("cordon without a reason: exit %d: %s", code, errOut)
	}
}

// An eviction a budget refuses is answered 429 with Retry-After: 10 s, which client-go retries by
// itself up to ten times. The request is bounded by the drain's deadline: against an API server
// (httptest, speaking as kube-apiserver does) that refuses every eviction so, evict returns soon
// after the deadline, with the refusal's reason, instead of after a minute and a half.
func TestEvictEndsAtTheDrainsDeadline(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/pods/keep/eviction") {
			http.NotFound(w, r)
			return
		}
		asked.Add(1)
		st := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 10).ErrStatus
		st.APIVersion, st.Kind = "v1", "Status"
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "10")
		w.WriteHeader(http.StatusTooManyRequests)
		_ = json.NewEncoder(w).Encode(st)
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	o := &Options{Client: cs}
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- o.evict(context.Background(), start.Add(time.Second), "ml", "keep", "uid-1") }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("evict still running after 30 s (drain deadline 1 s, %d requests)", asked.Load())
	}
	took := time.Since(start)
	if took > 5*time.Second {
		t.Errorf("evict took %v with a drain deadline of 1 s (its floor is %v)", took.Round(time.Millisecond), evictFloor)
	}
	if err == nil || !strings.Contains(err.Error(), "disruption budget") {
		t.Errorf("evict: %v, want the budget's refusal", err)
	}
	if asked.Load() < 1 {
		t.Errorf("the API server was not asked")
	}
}
