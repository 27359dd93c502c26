// Package chart tests charts/cardinal: `helm lint`, `helm template` rendered with default and
// non-default values and decoded strictly into typed objects, `helm install`/`upgrade`/`uninstall`
// against a real kube-apiserver (test/cluster), and the image builder in hack/images.
package chart

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/cardinal-gpu/cardinal/test/cluster"
)

const (
	chartDir    = "../../charts/cardinal"
	releaseName = "cardinal"
	namespace   = "cardinal-system"
)

// kubeVersion is what `helm template` and `helm lint` render for: the test-bed's Kubernetes, patch
// release included (Without it the test-bed helm renders for the minor of its own client-go, .0:
// TestTestBedHelmIsStamped.)
func kubeVersion(t *testing.T) string {
	t.Helper()
	return cluster.TestBedVersions(t).Kubernetes
}

// helm runs the test-bed's helm with args and returns its standard output; a failure fails t
// unless wantErr, in which case the error (with stderr) is returned.
func helm(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	bin := filepath.Join(cluster.BinDir(t), "helm")
	cmd := exec.Command(bin, args...)
	home := t.TempDir()
	// A private helm home: no repositories, caches or plugins of the machine leak into the test.
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// valuesFile writes values (nil: none) as a values file and returns helm's flag for it.
func valuesFile(t *testing.T, values map[string]any) []string {
	t.Helper()
	if values == nil {
		return nil
	}
	b, err := yaml.Marshal(values)
	if err != nil {
		t.Fatalf("marshal values: %v", err)
	}
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatalf("write values: %v", err)
	}
	return []string{"-f", p}
}

// templateArgs are the arguments of `helm template` for the test release.
func templateArgs(t *testing.T, values map[string]any, extra ...string) []string {
	args := append([]string{"template", releaseName, chartDir, "--namespace", namespace, "--kube-version", kubeVersion(t)}, valuesFile(t, values)...)
	return append(args, extra...)
}

// rendered is a chart rendering: every object decoded, typed where client-go knows the kind.
type rendered struct {
	objects []runtime.Object
}

// render runs `helm template` with values and decodes every document strictly (an unknown field,
// e.g. a misspelt one, fails the test).
func render(t *testing.T, values map[string]any, extra ...string) *rendered {
	t.Helper()
	out, err := helm(t, nil, templateArgs(t, values, extra...)...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return decode(t, out)
}

// renderErr runs `helm template` expecting it to fail and returns the error text.
func renderErr(t *testing.T, values map[string]any) string {
	t.Helper()
	_, err := helm(t, nil, templateArgs(t, values)...)
	if err == nil {
		t.Fatalf("helm template with %v succeeded, want an error", values)
	}
	return err.Error()
}

var strictYAML = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	json.SerializerOptions{Yaml: true, Strict: true})

func decode(t *testing.T, manifest string) *rendered {
	t.Helper()
	r := &rendered{}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := reader.Read()
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatalf("document without apiVersion/kind: %v\n%s", err, doc)
		}
		gvk := schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind)
		if scheme.Scheme.Recognizes(gvk) {
			obj, _, err := strictYAML.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("decode %s: %v\n%s", gvk, err, doc)
			}
			r.objects = append(r.objects, obj)
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatalf("decode %s: %v", gvk, err)
		}
		r.objects = append(r.objects, u)
	}
	return r
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// keys lists "Kind namespace/name" of every object, for diffs of what a rendering contains.
func (r *rendered) keys() []string {
	var out []string
	for _, o := range r.objects {
		out = append(out, objectKey(o))
	}
	return out
}

func objectKey(o runtime.Object) string {
	m, err := meta.Accessor(o)
	if err != nil {
		return fmt.Sprintf("%T", o)
	}
	return fmt.Sprintf("%s %s/%s", o.GetObjectKind().GroupVersionKind().Kind, m.GetNamespace(), m.GetName())
}

// get returns the one object of type T named name; it fails t if there is none.
func get[T runtime.Object](t *testing.T, r *rendered, name string) T {
	t.Helper()
	for _, o := range r.objects {
		if v, ok := o.(T); ok {
			if m, err := meta.Accessor(o); err == nil && m.GetName() == name {
				return v
			}
		}
	}
	var zero T
	t.Fatalf("no %T named %q in the rendering; have %v", zero, name, r.keys())
	return zero
}

// all returns every object of type T.
func all[T runtime.Object](r *rendered) []T {
	var out []T
	for _, o := range r.objects {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// has reports whether an object of kind named name was rendered.
func (r *rendered) has(kind, name string) bool {
	for _, o := range r.objects {
		m, err := meta.Accessor(o)
		if err == nil && o.GetObjectKind().GroupVersionKind().Kind == kind && m.GetName() == name {
			return true
		}
	}
	return false
}

// TestTestBedHelmIsStamped: the test bed builds helm (3 or 4, hack/testbed/build.sh --helm) with the
// stamps of a release build: its version, and the Kubernetes version it renders for without a cluster
// (its client-go's minor: helm 3 from the stamp, helm 4 from the binary's build information). So
// `helm template` and `helm lint` work without --kube-version; an unstamped helm 3 assumes v1.20.0 and
// refuses the chart ("incompatible with Kubernetes v1.20.0").
func TestTestBedHelmIsStamped(t *testing.T) {
	version, err := helm(t, nil, "version", "--template", "{{.Version}}")
	if err != nil {
		t.Fatalf("%v", err)
	}
	if major := cluster.TestBedVersions(t).HelmMajor; !strings.HasPrefix(version, fmt.Sprintf("v%d.", major)) || strings.Contains(version, "unreleased") {
		t.Errorf("helm version %q; want the release's v%d.x.y", version, major)
	}
	out, err := helm(t, nil, "template", releaseName, chartDir, "--namespace", namespace)
	if err != nil {
		t.Fatalf("helm template without --kube-version: %v", err)
	}
	// The ValidatingAdmissionPolicies render only where the Kubernetes version serves them (1.30+).
	if r := decode(t, out); !r.has("ValidatingAdmissionPolicy", devicePluginName+"-node-restriction") {
		t.Errorf("rendered for a Kubernetes without ValidatingAdmissionPolicy: %v", r.keys())
	}
	if out, err := helm(t, nil, "lint", "--strict", chartDir, "--namespace", namespace); err != nil || !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint without --kube-version: %v\n%s", err, out)
	}
}
