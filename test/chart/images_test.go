package chart

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The image builder (hack/images, its own Go module) is tested end to end: it packs two small
// programs, a static one and a cgo one, and the test checks the archives with the standard library
// only (digests, OCI layout, Docker manifest.json), then runs each entrypoint chrooted into its
// unpacked layer, which proves the image carries everything the binary needs.

const imagesModule = "../../hack/images"

var testPrograms = map[string]struct {
	source string
	cgo    bool
	want   string
}{
	"static": {source: "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"static ok\") }\n", want: "static ok"},
	"cgo": {source: "package main\n\n// #include <stdio.h>\n// static void hello(void) { printf(\"cgo ok\\n\"); fflush(stdout); }\nimport \"C\"\n\nfunc main() { C.hello() }\n",
		cgo: true, want: "cgo ok"},
}

func buildProgram(t *testing.T, dir, name string) string {
	t.Helper()
	p := testPrograms[name]
	src := filepath.Join(dir, name+".go")
	if err := os.WriteFile(src, []byte(p.source), 0o600); err != nil {
		t.Fatalf("%v", err)
	}
	out := filepath.Join(dir, name)
	// Built in the temp folder, outside any module: the program uses the standard library only.
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED="+map[bool]string{true: "1", false: "0"}[p.cgo])
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, b)
	}
	return out
}

func runImageBuilder(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", append([]string{"run", "."}, args...)...)
	cmd.Dir = imagesModule
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// ociArchive is an unpacked image tarball.
type ociArchive map[string][]byte

func readArchive(t *testing.T, path string) ociArchive {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer f.Close()
	a := ociArchive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("%v", err)
		}
		a[h.Name] = b
	}
	return a
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// blob returns the blob d names, after checking its size and digest.
func (a ociArchive) blob(t *testing.T, d descriptor) []byte {
	t.Helper()
	hexDigest, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", d.Digest)
	}
	b, ok := a["blobs/sha256/"+hexDigest]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != hexDigest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match its digest or size %d", d.Digest, d.Size)
	}
	return b
}

type imageConfig struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string   `json:"User"`
		Entrypoint []string `json:"Entrypoint"`
		Env        []string `json:"Env"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// checkArchive validates the OCI layout and the Docker manifest and returns the config and the
// uncompressed layer.
func checkArchive(t *testing.T, a ociArchive, ref string) (imageConfig, []byte) {
	t.Helper()
	var layoutFile struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(a["oci-layout"], &layoutFile); err != nil || layoutFile.Version != "1.0.0" {
		t.Errorf("oci-layout = %q (%v), want imageLayoutVersion 1.0.0", a["oci-layout"], err)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(a["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(index.Manifests))
	}
	if got := index.Manifests[0].Annotations["io.containerd.image.name"]; got != ref {
		t.Errorf("image name annotation = %q, want %q", got, ref)
	}
	var manifest struct {
		MediaType string       `json:"mediaType"`
		Config    descriptor   `json:"config"`
		Layers    []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(a.blob(t, index.Manifests[0]), &manifest); err != nil {
		t.Fatalf("manifest: %v", err)
	}
	if manifest.MediaType != "application/vnd.oci.image.manifest.v1+json" || len(manifest.Layers) != 1 {
		t.Fatalf("manifest %+v, want an OCI manifest with one layer", manifest)
	}
	var cfg imageConfig
	if err := json.Unmarshal(a.blob(t, manifest.Config), &cfg); err != nil {
		t.Fatalf("config: %v", err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(a.blob(t, manifest.Layers[0])))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	layer, err := io.ReadAll(gz)
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	sum := sha256.Sum256(layer)
	if diff := cmp.Diff([]string{"sha256:" + hex.EncodeToString(sum[:])}, cfg.RootFS.DiffIDs); diff != "" {
		t.Errorf("diff_ids (-uncompressed layer +config):\n%s", diff)
	}
	// docker load reads manifest.json.
	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(a["manifest.json"], &docker); err != nil || len(docker) != 1 {
		t.Fatalf("manifest.json: %v", err)
	}
	want := fmt.Sprintf("blobs/sha256/%s", strings.TrimPrefix(manifest.Config.Digest, "sha256:"))
	if docker[0].Config != want || len(docker[0].Layers) != 1 || docker[0].RepoTags[0] != ref {
		t.Errorf("manifest.json = %+v, want config %s and tag %s", docker[0], want, ref)
	}
	return cfg, layer
}

// unpack writes the layer's files under dir.
func unpack(t *testing.T, layer []byte, dir string) []string {
	t.Helper()
	var names []string
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return names
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		names = append(names, "/"+strings.TrimSuffix(h.Name, "/"))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatalf("%v", err)
			}
		case tar.TypeReg:
			b, _ := io.ReadAll(tr)
			if err := os.WriteFile(p, b, os.FileMode(h.Mode)); err != nil {
				t.Fatalf("%v", err)
			}
		default:
			t.Fatalf("layer entry %s has type %c; the builder writes files and directories only", h.Name, h.Typeflag)
		}
	}
}

func TestImageBuilder(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test chroots into the built images and needs root (sessions and CI run as root)")
	}
	dir := t.TempDir()
	static, cgo := buildProgram(t, dir, "static"), buildProgram(t, dir, "cgo")
	out := filepath.Join(dir, "images")
	if b, err := runImageBuilder(t, "--out", out, "--repository", "example.test/cardinal", "--tag", "t1",
		"--static", "static="+static, "--glibc", "cgo="+cgo); err != nil {
		t.Fatalf("hack/images: %v\n%s", err, b)
	}
	for _, tc := range []struct {
		name     string
		user     string
		ldPath   bool
		mustHave []string
	}{
		{name: "static", user: "65532:65532", mustHave: []string{"/usr/local/bin/static", "/etc/passwd", "/etc/group"}},
		{name: "cgo", user: "0:0", ldPath: true, mustHave: []string{"/usr/local/bin/cgo", "/lib64/ld-linux-x86-64.so.2",
			"/lib/x86_64-linux-gnu/libc.so.6", "/lib/x86_64-linux-gnu/libdl.so.2", "/lib/x86_64-linux-gnu/libpthread.so.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := "example.test/cardinal/" + tc.name + ":t1"
			cfg, layer := checkArchive(t, readArchive(t, filepath.Join(out, tc.name+".tar")), ref)
			if cfg.Architecture != "amd64" || cfg.OS != "linux" || cfg.Config.User != tc.user {
				t.Errorf("config %s/%s user %q, want linux/amd64 user %q", cfg.OS, cfg.Architecture, cfg.Config.User, tc.user)
			}
			if diff := cmp.Diff([]string{"/usr/local/bin/" + tc.name}, cfg.Config.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			if got := strings.Contains(strings.Join(cfg.Config.Env, " "), "LD_LIBRARY_PATH=/usr/local/nvidia/lib64"); got != tc.ldPath {
				t.Errorf("LD_LIBRARY_PATH with the driver mount = %v, want %v (env %v)", got, tc.ldPath, cfg.Config.Env)
			}
			root := filepath.Join(dir, "root-"+tc.name)
			names := unpack(t, layer, root)
			for _, f := range tc.mustHave {
				if !slices.Contains(names, f) {
					t.Errorf("layer lacks %s (has %v)", f, names)
				}
			}
			if tc.name == "static" && slices.Contains(names, "/lib/x86_64-linux-gnu/libc.so.6") {
				t.Error("the static image carries libc")
			}
			cmd := exec.Command(cfg.Config.Entrypoint[0])
			cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
			cmd.Env = cfg.Config.Env
			b, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(b)) != testPrograms[tc.name].want {
				t.Errorf("running the entrypoint inside the image: %v, output %q, want %q", err, b, testPrograms[tc.name].want)
			}
		})
	}
	t.Run("reproducible", func(t *testing.T) {
		again := filepath.Join(dir, "again")
		if b, err := runImageBuilder(t, "--out", again, "--repository", "example.test/cardinal", "--tag", "t1", "--static", "static="+static); err != nil {
			t.Fatalf("%v\n%s", err, b)
		}
		first, _ := os.ReadFile(filepath.Join(out, "static.tar"))
		second, _ := os.ReadFile(filepath.Join(again, "static.tar"))
		if !bytes.Equal(first, second) {
			t.Error("the same binary gave two different archives")
		}
	})
	t.Run("refuses a dynamic binary as static", func(t *testing.T) {
		b, err := runImageBuilder(t, "--out", filepath.Join(dir, "bad"), "--static", "cgo="+cgo)
		if err == nil || !strings.Contains(b, "is dynamically linked") {
			t.Errorf("err = %v, output %q, want a refusal naming the dynamic linking", err, b)
		}
	})
}
