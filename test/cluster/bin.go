package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
)

// BinDirEnv names the folder of the pinned binaries; `make test` sets it to the output of
// `hack/testbed/build.sh --print-dir`.
const BinDirEnv = "CARDINAL_TESTBED_BIN"

// binaries are the commands hack/testbed/build.sh builds, all of which BinDir guarantees.
var binaries = [...]string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "helm"}

// binDirOnce builds the binaries at most once per process; the result is immutable after that.
var binDirOnce = sync.OnceValues(findOrBuildBinaries)

// BinDir returns the folder holding the pinned etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kubelet, kubectl and helm. It uses $CARDINAL_TESTBED_BIN when that folder holds them all, else runs
// hack/testbed/build.sh (minutes on a cold cache, nothing on a warm one). It never skips: a
// binary that cannot be had fails t.
func BinDir(t TB) string {
	t.Helper()
	dir, err := binDirOnce()
	if err != nil {
		t.Fatalf("test-bed binaries: %v", err)
	}
	return dir
}

func findOrBuildBinaries() (string, error) {
	if dir := os.Getenv(BinDirEnv); dir != "" && haveBinaries(dir) {
		return dir, nil
	}
	dir, err := runBuildScript()
	if err != nil {
		return "", err
	}
	if !haveBinaries(dir) {
		return "", fmt.Errorf("hack/testbed/build.sh printed %q, which lacks some of %v", dir, binaries)
	}
	return dir, nil
}

// KueueDirEnv names the folder of the pinned Kueue manager, its CRDs (crds/) and its webhook
// configurations (webhooks.yaml); `make test` sets it to `hack/testbed/build.sh --kueue --print-dir`.
const KueueDirEnv = "CARDINAL_KUEUE_DIR"

// kueueDirOnce builds Kueue at most once per process.
var kueueDirOnce = sync.OnceValues(findOrBuildKueue)

// KueueDir returns the folder holding the pinned Kueue manager (kueue), its CRDs (crds/*.yaml) and
// its webhook manifests (webhooks.yaml). It uses $CARDINAL_KUEUE_DIR when that folder holds them,
// else runs hack/testbed/build.sh --kueue (minutes on a cold cache). It never skips.
func KueueDir(t TB) string {
	t.Helper()
	dir, err := kueueDirOnce()
	if err != nil {
		t.Fatalf("Kueue for the test bed: %v", err)
	}
	return dir
}

func findOrBuildKueue() (string, error) {
	if dir := os.Getenv(KueueDirEnv); dir != "" && haveKueue(dir) {
		return dir, nil
	}
	dir, err := runBuildScript("--kueue")
	if err != nil {
		return "", err
	}
	if !haveKueue(dir) {
		return "", fmt.Errorf("hack/testbed/build.sh --kueue printed %q, which lacks kueue, crds/ or webhooks.yaml", dir)
	}
	return dir, nil
}

func haveKueue(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "kueue"))
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return false
	}
	crds, _ := filepath.Glob(filepath.Join(dir, "crds", "*.yaml"))
	_, err = os.Stat(filepath.Join(dir, "webhooks.yaml"))
	return len(crds) > 0 && err == nil
}

// runBuildScript runs hack/testbed/build.sh with args and returns the folder it printed last.
func runBuildScript(args ...string) (string, error) {
	script, err := buildScript()
	if err != nil {
		return "", err
	}
	var stderr bytes.Buffer
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	// The script says what it builds and how long each took: show it as it goes (a first build takes
	// minutes), and keep it for the error.
	cmd.Stderr = io.MultiWriter(&stderr, os.Stderr)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w\n%s", script, err, tail(stderr.Bytes(), 40))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

func haveBinaries(dir string) bool {
	for _, b := range binaries {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// buildScript finds hack/testbed/build.sh above the working directory (go test runs in the
// package folder; the demo runs from the repository root) or, failing that, above this source file.
func buildScript() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			script := filepath.Join(dir, "hack", "testbed", "build.sh")
			if _, err := os.Stat(script); err == nil {
				return script, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", errors.New("hack/testbed/build.sh not found above the working directory; set " + BinDirEnv)
}

// Versions are the versions of the test-bed binaries BinDir found: what the tests run against.
type Versions struct {
	// Kubernetes is kube-apiserver's version, e.g. "v1.37.2".
	Kubernetes string
	// Minor is Kubernetes' minor version, e.g. 37.
	Minor int
	// Helm is helm's version, e.g. "v4.3.1".
	Helm string
	// HelmMajor is helm's major version, 3 or 4.
	HelmMajor int
}

var versionsOnce = sync.OnceValues(func() (Versions, error) {
	dir, err := binDirOnce()
	if err != nil {
		return Versions{}, err
	}
	return binaryVersions(dir)
})

// TestBedVersions returns the versions of the test-bed binaries (it runs them once per process).
func TestBedVersions(t TB) Versions {
	t.Helper()
	v, err := versionsOnce()
	if err != nil {
		t.Fatalf("test-bed versions: %v", err)
	}
	return v
}

// binaryVersions asks dir's kube-apiserver and helm for their versions.
func binaryVersions(dir string) (Versions, error) {
	var v Versions
	out, err := exec.Command(filepath.Join(dir, "kube-apiserver"), "--version").Output()
	if err != nil {
		return v, fmt.Errorf("kube-apiserver --version: %w", err)
	}
	// "Kubernetes v1.37.2"
	if v.Kubernetes, v.Minor, err = parseVersion(strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes ")); err != nil {
		return v, fmt.Errorf("kube-apiserver --version printed %q: %w", out, err)
	}
	if v.Kubernetes == "v0.0.0" {
		return v, fmt.Errorf("kube-apiserver --version printed %q: not a stamped release", out)
	}
	out, err = exec.Command(filepath.Join(dir, "helm"), "version", "--template", "{{.Version}}").Output()
	if err != nil {
		return v, fmt.Errorf("helm version: %w", err)
	}
	var major int
	v.Helm = strings.TrimSpace(string(out))
	if _, err := fmt.Sscanf(v.Helm, "v%d.", &major); err != nil {
		return v, fmt.Errorf("helm version printed %q: %w", out, err)
	}
	v.HelmMajor = major
	return v, nil
}

// parseVersion checks that s is v1.MINOR.PATCH (build metadata after "-" or "+" dropped) and returns
// that and the minor.
func parseVersion(s string) (string, int, error) {
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	var major, minor, patch int
	if n, err := fmt.Sscanf(s, "v%d.%d.%d", &major, &minor, &patch); err != nil || n != 3 || major != 1 {
		return s, 0, fmt.Errorf("%q is not v1.MINOR.PATCH", s)
	}
	return fmt.Sprintf("v1.%d.%d", minor, patch), minor, nil
}
