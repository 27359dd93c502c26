package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// KueueNamespace is the namespace Kueue's Configuration names as its own (Kueue refuses to manage
// pods there).
const KueueNamespace = "kueue-system"

const (
	kueueReadyTimeout = 90 * time.Second
	kueueCertLife     = 24 * time.Hour
)

// kueueWebhookGroups are the API groups whose Kueue webhooks the harness installs: core (pods),
// batch (Jobs) and Kueue's own. The manifests also list webhooks for frameworks the test bed does not
// run (Deployments, StatefulSets, JobSets, Kubeflow, Ray, ...); a webhook for a built-in resource
// whose integration is off would refuse every such object (its path serves 404), and the others
// match nothing.
var kueueWebhookGroups = []string{"", "batch", "kueue.x-k8s.io"}

// KueueOptions configures StartKueue.
type KueueOptions struct {
	// Namespaces are the namespaces Kueue manages: its managedJobsNamespaceSelector, and the scope of
	// its pod and Job webhooks. At least one; never kube-system or KueueNamespace.
	Namespaces []string
	// Frameworks are Kueue's integrations (integrations.frameworks), e.g. "batch/job", "pod".
	Frameworks []string
	// ExcludeResourcePrefixes are resources Kueue's quota ignores (resources.excludeResourcePrefixes).
	ExcludeResourcePrefixes []string
}

// Kueue is a Kueue manager running against the cluster.
type Kueue struct {
	Process *Process
	// Config is the Kueue Configuration it runs with (YAML), for logs and failure messages.
	Config []byte
}

// StartKueue installs Kueue's CRDs, starts its manager (the pinned build, see KueueDir) with its
// webhooks served on 127.0.0.1 under a certificate of a fresh test CA, waits until it is ready, and
// registers its webhooks for pods, Jobs and its own resources with URL client configurations. Kueue
// runs with the admin kubeconfig, no leader election, no internal certificate management, no
// visibility server and no metrics endpoint. Its manager insists on reading a metrics certificate
// from /etc/kueue/metrics/certs when it does not manage certificates; so it runs in a private mount
// namespace whose /etc is an overlay holding that folder, and the host's /etc is never written. It
// is stopped at t's cleanup.
func (c *Cluster) StartKueue(t TB, o KueueOptions) *Kueue {
	t.Helper()
	requireRoot(t, "unshare", "mount")
	if len(o.Namespaces) == 0 {
		t.Fatalf("StartKueue: no namespace to manage")
	}
	dir := KueueDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), kueueReadyTimeout)
	defer cancel()
	if err := c.installKueueCRDs(ctx, filepath.Join(dir, "crds")); err != nil {
		t.Fatalf("Kueue CRDs: %v", err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: KueueNamespace}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("namespace %s: %v", KueueNamespace, err)
	}

	kdir := c.path("kueue")
	certDir := filepath.Join(kdir, "certs")
	caPEM, err := WriteServingCert(certDir, kueueCertLife)
	if err != nil {
		t.Fatalf("Kueue serving certificate: %v", err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatalf("Kueue ports: %v", err)
	}
	webhookPort, healthPort := ports[0], ports[1]
	config, err := kueueConfig(o, certDir, webhookPort, healthPort)
	if err != nil {
		t.Fatalf("Kueue configuration: %v", err)
	}
	configPath := filepath.Join(kdir, "config.yaml")
	if err := os.WriteFile(configPath, config, 0o600); err != nil {
		t.Fatalf("Kueue configuration: %v", err)
	}
	upper, work := filepath.Join(kdir, "etc-upper"), filepath.Join(kdir, "etc-work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("Kueue overlay: %v", err)
		}
	}
	k := &Kueue{Config: config}
	k.Process = c.startProcess(t, "kueue", func() (*exec.Cmd, error) {
		return exec.Command("unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", kueueNamespaceScript, "sh",
			upper, work, certDir,
			filepath.Join(dir, "kueue"),
			"--config="+configPath,
			"--kubeconfig="+c.Kubeconfig,
			// The visibility server is an aggregated API on a fixed port (8082): two tests at once
			// would fight over it, and nothing here reads it.
			"--feature-gates=VisibilityOnDemand=false",
		), nil
	})
	if err := c.waitHTTP(k.Process, kueueReadyTimeout, http.DefaultClient, "http://127.0.0.1:"+strconv.Itoa(healthPort)+"/readyz", ""); err != nil {
		t.Fatalf("%v", err)
	}
	if err := c.installKueueWebhooks(ctx, filepath.Join(dir, "webhooks.yaml"), "https://127.0.0.1:"+strconv.Itoa(webhookPort), caPEM, o.Namespaces); err != nil {
		t.Fatalf("Kueue webhooks: %v", err)
	}
	return k
}

// kueueNamespaceScript runs as `sh -c` in a private mount namespace: $1 and $2 are the overlay's
// upper and work folders, $3 the folder of tls.crt and tls.key; the rest is the command.
const kueueNamespaceScript = `set -e
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc
mkdir -p /etc/kueue/metrics/certs
cp "$3/tls.crt" "$3/tls.key" /etc/kueue/metrics/certs/
shift 3
exec "$@"
`

// kueueConfig is Kueue's Configuration for the test bed.
func kueueConfig(o KueueOptions, certDir string, webhookPort, healthPort int) ([]byte, error) {
	for _, ns := range o.Namespaces {
		if ns == metav1.NamespaceSystem || ns == KueueNamespace {
			return nil, fmt.Errorf("namespace %s cannot be managed by Kueue", ns)
		}
	}
	cfg := map[string]any{
		"apiVersion":                 "config.kueue.x-k8s.io/v1beta2",
		"kind":                       "Configuration",
		"namespace":                  KueueNamespace,
		"health":                     map[string]any{"healthProbeBindAddress": "127.0.0.1:" + strconv.Itoa(healthPort)},
		"metrics":                    map[string]any{"bindAddress": "0"},
		"webhook":                    map[string]any{"host": "127.0.0.1", "port": webhookPort, "certDir": certDir},
		"leaderElection":             map[string]any{"leaderElect": false},
		"internalCertManagement":     map[string]any{"enable": false},
		"manageJobsWithoutQueueName": false,
		"managedJobsNamespaceSelector": map[string]any{"matchExpressions": []any{map[string]any{
			"key": corev1.LabelMetadataName, "operator": "In", "values": o.Namespaces,
		}}},
		"integrations": map[string]any{"frameworks": o.Frameworks},
	}
	if len(o.ExcludeResourcePrefixes) > 0 {
		cfg["resources"] = map[string]any{"excludeResourcePrefixes": o.ExcludeResourcePrefixes}
	}
	return yaml.Marshal(cfg)
}

// installKueueCRDs creates Kueue's CRDs with kubectl and waits until they are established.
func (c *Cluster) installKueueCRDs(ctx context.Context, dir string) error {
	kubectl := filepath.Join(c.bin, "kubectl")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", dir},
		{"wait", "--for=condition=Established", "--timeout=60s", "-f", dir},
	} {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %v: %w\n%s", args, err, tail(out, 20))
		}
	}
	return nil
}

// installKueueWebhooks registers the webhooks of Kueue's manifests (file) for kueueWebhookGroups,
// each called at base + its path with caBundle; those of pods and Jobs only for the namespaces Kueue
// manages (as Kueue's own installation scopes them).
func (c *Cluster) installKueueWebhooks(ctx context.Context, file, base string, caBundle []byte, namespaces []string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	mutating, validating, err := kueueWebhooks(data, base, caBundle, namespaces)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	ar := c.Client.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mutating, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = ar.ValidatingWebhookConfigurations().Create(ctx, validating, metav1.CreateOptions{})
	return err
}

// kueueWebhooks turns Kueue's webhook manifests (a Mutating and a Validating configuration whose
// webhooks name a Service) into configurations that call base + path with caBundle, keeping the
// webhooks of kueueWebhookGroups and scoping those of namespaced workloads to namespaces.
func kueueWebhooks(data []byte, base string, caBundle []byte, namespaces []string) (*admissionregistrationv1.MutatingWebhookConfiguration, *admissionregistrationv1.ValidatingWebhookConfiguration, error) {
	var mutating *admissionregistrationv1.MutatingWebhookConfiguration
	var validating *admissionregistrationv1.ValidatingWebhookConfiguration
	selector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces,
	}}}
	convert := func(name string, cc *admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations, ns **metav1.LabelSelector) (bool, error) {
		for _, r := range rules {
			for _, g := range r.APIGroups {
				if !slices.Contains(kueueWebhookGroups, g) {
					return false, nil
				}
			}
		}
		if cc.Service == nil || cc.Service.Path == nil {
			return false, fmt.Errorf("webhook %s names no service path", name)
		}
		url := base + *cc.Service.Path
		*cc = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle}
		for _, r := range rules {
			if slices.Contains(r.APIGroups, "") || slices.Contains(r.APIGroups, "batch") {
				*ns = selector.DeepCopy()
			}
		}
		return true, nil
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, nil, err
		}
		if raw == nil {
			continue
		}
		doc, err := yaml.Marshal(raw)
		if err != nil {
			return nil, nil, err
		}
		switch raw["kind"] {
		case "MutatingWebhookConfiguration":
			mutating = &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, mutating); err != nil {
				return nil, nil, err
			}
			var keep []admissionregistrationv1.MutatingWebhook
			for _, w := range mutating.Webhooks {
				ok, err := convert(w.Name, &w.ClientConfig, w.Rules, &w.NamespaceSelector)
				if err != nil {
					return nil, nil, err
				}
				if ok {
					keep = append(keep, w)
				}
			}
			mutating.Webhooks = keep
			mutating.Name = "kueue-mutating-webhook-configuration"
		case "ValidatingWebhookConfiguration":
			validating = &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := yaml.UnmarshalStrict(doc, validating); err != nil {
				return nil, nil, err
			}
			var keep []admissionregistrationv1.ValidatingWebhook
			for _, w := range validating.Webhooks {
				ok, err := convert(w.Name, &w.ClientConfig, w.Rules, &w.NamespaceSelector)
				if err != nil {
					return nil, nil, err
				}
				if ok {
					keep = append(keep, w)
				}
			}
			validating.Webhooks = keep
			validating.Name = "kueue-validating-webhook-configuration"
		default:
			return nil, nil, fmt.Errorf("unexpected kind %v", raw["kind"])
		}
	}
	if mutating == nil || validating == nil || len(mutating.Webhooks) == 0 || len(validating.Webhooks) == 0 {
		return nil, nil, errors.New("no mutating or no validating webhook for pods, Jobs or Kueue's resources")
	}
	return mutating, validating, nil
}
