package kubeconfig

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

func TestLoadFromFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: secret}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != "secret" {
		t.Errorf("host %q token %q, want the file's", rc.Host, rc.BearerToken)
	}
}

func TestLoadErrorsNameTheSource(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), "--kubeconfig "+missing) {
		t.Errorf("missing file: error %v, want it to name --kubeconfig and the path", err)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := Load(""); err == nil || !strings.Contains(err.Error(), "in-cluster config") {
		t.Errorf("outside a cluster: error %v, want it to say in-cluster config", err)
	}
}

// TestClientsAskForUncompressedResponses: a client built from Load sends no Accept-Encoding: gzip,
// so the API server does not compress what it sends (watch events above all). Over TLS, as to an API
// server: client-go uses Go's default transport, which ignores the setting, for plain HTTP.
func TestClientsAskForUncompressedResponses(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- r.Header.Get("Accept-Encoding"):
		default:
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`))
	}))
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"" + srv.URL + "\", insecure-skip-tls-verify: true}}]\n" +
		"users: [{name: u, user: {token: secret}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if enc := <-got; strings.Contains(enc, "gzip") {
		t.Errorf("the client sent Accept-Encoding %q: the API server would gzip its responses", enc)
	}
}
