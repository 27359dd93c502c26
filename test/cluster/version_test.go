package cluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in    string
		want  string
		minor int
		bad   bool
	}{
		{in: "v1.37.2", want: "v1.37.2", minor: 37},
		{in: "v1.35.4-gke.1245000", want: "v1.35.4", minor: 35},
		{in: "v1.36.3+k3s1", want: "v1.36.3", minor: 36},
		{in: "v0.0.0", bad: true},
		{in: "1.37", bad: true},
		{in: "", bad: true},
	} {
		got, minor, err := parseVersion(tc.in)
		if (err != nil) != tc.bad || (!tc.bad && (got != tc.want || minor != tc.minor)) {
			t.Errorf("parseVersion(%q) = %q, %d, %v; want %q, %d, error %v", tc.in, got, minor, err, tc.want, tc.minor, tc.bad)
		}
	}
}

// TestBinaryVersions reads the versions the binaries print: the tests that depend on the minor or
// on helm's major (chart tests, kubelet settings) take them from here.
func TestBinaryVersions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, out string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho '"+out+"'\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("kube-apiserver", "Kubernetes v1.37.2")
	write("helm", "v4.3.1")
	v, err := binaryVersions(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Versions{Kubernetes: "v1.37.2", Minor: 37, Helm: "v4.3.1", HelmMajor: 4}); v != want {
		t.Errorf("binaryVersions = %+v, want %+v", v, want)
	}
	write("kube-apiserver", "Kubernetes v0.0.0-master+$Format:%H$")
	if _, err := binaryVersions(dir); err == nil {
		t.Error("an unstamped kube-apiserver (v0.0.0) was accepted")
	}
}
