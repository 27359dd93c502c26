package webhook

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/cardinal-gpu/cardinal/pkg/annotations"
	"github.com/cardinal-gpu/cardinal/pkg/webhook/certs"
)

// selfManaged are the chart's self-managed certificate settings.
func selfManaged() *certs.Config {
	return &certs.Config{Namespace: "cardinal-system", SecretName: "cardinal-webhook-certs", WebhookConfiguration: "cardinal-webhook",
		Hosts: []string{"cardinal-webhook.cardinal-system.svc"}, CertLifetime: 90 * 24 * time.Hour, CALifetime: 5 * 365 * 24 * time.Hour,
		CheckInterval: time.Minute}
}

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		return Config{
			Listen: ":9443", CertDir: "/certs", SchedulerName: "cardinal-scheduler",
			TrustedServiceAccounts: []string{"system:serviceaccount:cardinal-system:extender"},
			Resources:              annotations.DefaultResourceNames(), Client: fake.NewClientset(),
		}
	}
	tests := []struct {
		name    string
		edit    func(*Config)
		wantErr string // empty: valid
	}{
		{"the defaults", func(*Config) {}, ""},
		{"no port", func(c *Config) { c.Listen = "127.0.0.1" }, "--listen"},
		{"port 0 (controller-runtime would pick 9443)", func(c *Config) { c.Listen = ":0" }, "port must be 1..65535"},
		{"no cert dir", func(c *Config) { c.CertDir = "" }, "--cert-dir is empty"},
		{"no scheduler", func(c *Config) { c.SchedulerName = "" }, "--scheduler-name is empty"},
		{"no client", func(c *Config) { c.Client = nil }, "no Kubernetes client"},
		{"a user, not a service account", func(c *Config) { c.TrustedServiceAccounts = []string{"alice"} }, `"alice" is not system:serviceaccount:<namespace>:<name>`},
		{"a service account without a namespace", func(c *Config) {
			c.TrustedServiceAccounts = []string{"system:serviceaccount::extender"}
		}, "is not system:serviceaccount"},
		{"a namespace allowed device variables", func(c *Config) { c.DeviceEnvNamespaces = []string{"gpu-operator", "kube-system"} }, ""},
		{"a device-env namespace that is no name", func(c *Config) { c.DeviceEnvNamespaces = []string{"GPU Operator"} }, `--device-env-namespaces: "GPU Operator" is not a namespace name`},
		{"self-managed certificates need no cert dir", func(c *Config) { c.CertDir = ""; c.Certificates = selfManaged() }, ""},
		{"self-managed certificates checked too rarely", func(c *Config) {
			c.Certificates = selfManaged()
			c.Certificates.CheckInterval = 16 * 24 * time.Hour
		}, "certificates: --cert-check-interval 384h0m0s must be positive and at most a sixth of --cert-lifetime (360h0m0s)"},
		{"self-managed certificates for no host", func(c *Config) { c.Certificates = selfManaged(); c.Certificates.Hosts = nil }, "--cert-hosts is empty"},
		{"a resource name used twice", func(c *Config) { c.Resources.Cores = c.Resources.Mem }, "used twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.edit(&c)
			err := c.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
