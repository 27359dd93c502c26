package kubeconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
