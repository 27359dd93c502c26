package cli

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The krew manifest (plugins/krew/cardinal.yaml) follows krew's conventions: the plugin is named
// after the binary's suffix, every platform has an os/arch selector, an archive named for it under
// spec.version's release, a sha256, and the binary `make build` produces (kubectl-cardinal).
func TestKrewManifest(t *testing.T) {
	raw, err := os.ReadFile("../../plugins/krew/cardinal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("plugins/krew/cardinal.yaml: %v", err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" {
		t.Errorf("apiVersion %q kind %q, want krew.googlecontainertools.github.com/v1alpha2 Plugin", m.APIVersion, m.Kind)
	}
	// `make build` builds ./cmd/kubectl-cardinal into bin/, named after its folder.
	makefile, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^build:[\s\S]*?\$\(GO\) build[^\n]*-o \$\(BIN\)/[^\n]*\./cmd/kubectl-cardinal\b`).Match(makefile) {
		t.Fatalf("the Makefile's build target does not build ./cmd/kubectl-cardinal into bin/")
	}
	const binary = "kubectl-cardinal"
	if want := strings.TrimPrefix(binary, "kubectl-"); m.Metadata.Name != want {
		t.Errorf("metadata.name %q, want %q (krew runs kubectl-<name>)", m.Metadata.Name, want)
	}
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(m.Spec.Version) {
		t.Errorf("spec.version %q, want vX.Y.Z", m.Spec.Version)
	}
	if m.Spec.Homepage == "" || m.Spec.ShortDescription == "" || m.Spec.Description == "" {
		t.Errorf("homepage, shortDescription and description are required")
	}
	if len(m.Spec.Platforms) == 0 {
		t.Fatal("no platforms")
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	seen := map[string]bool{}
	for i, p := range m.Spec.Platforms {
		os, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		if os == "" || arch == "" || seen[os+"/"+arch] {
			t.Errorf("platform %d: selector %v, want a distinct os and arch", i, p.Selector.MatchLabels)
		}
		seen[os+"/"+arch] = true
		want := binary
		if os == "windows" {
			want += ".exe"
		}
		if p.Bin != want {
			t.Errorf("platform %s/%s: bin %q, want %q (what make build produces)", os, arch, p.Bin, want)
		}
		archive := "/releases/download/" + m.Spec.Version + "/" + binary + "_" + os + "_" + arch + ".tar.gz"
		if !strings.HasPrefix(p.URI, m.Spec.Homepage) || !strings.HasSuffix(p.URI, archive) {
			t.Errorf("platform %s/%s: uri %q, want %s%s (hack/krew-release.sh's archive)", os, arch, p.URI, m.Spec.Homepage, archive)
		}
		if !hex.MatchString(p.SHA256) {
			t.Errorf("platform %s/%s: sha256 %q is not 64 hex digits", os, arch, p.SHA256)
		}
	}
}
