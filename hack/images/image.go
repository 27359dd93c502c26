package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

type imageKind int

const (
	kindStatic imageKind = iota // static binary, non-root
	kindGlibc                   // dynamic binary with the host's glibc files, root
)

type imageSpec struct {
	name, binary string
	kind         imageKind
}

const (
	nonRootID   = 65532
	binDir      = "/usr/local/bin"
	caBundle    = "/etc/ssl/certs/ca-certificates.crt"
	driverPaths = "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
)

// dlopenLibs are glibc libraries the NVIDIA driver's libnvidia-ml.so.1 links against; the binary
// itself may not need them (glibc 2.34 moved their symbols into libc), but the library it dlopens
// at run time does, and the driver mounts bring only NVIDIA's own files.
var dlopenLibs = []string{"libdl.so.2", "libpthread.so.0", "libm.so.6", "librt.so.1"}

// epoch is every timestamp in the image, so that the same inputs give the same digest.
var epoch = time.Unix(0, 0).UTC()

// build writes <out>/<name>.tar and returns its path and the image's manifest digest.
func build(s imageSpec, ref, sysroot, out string) (string, v1.Hash, error) {
	bin, err := os.ReadFile(s.binary)
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("read binary: %w", err)
	}
	info, err := inspectELF(bin)
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("%s: %w", s.binary, err)
	}
	fs := newFileSet()
	exe := path.Join(binDir, s.name)
	fs.addFile(exe, 0o755, bin)
	user := fmt.Sprintf("%d:%d", nonRootID, nonRootID)
	env := []string{"PATH=" + binDir}
	switch s.kind {
	case kindStatic:
		if info.dynamic() {
			return "", v1.Hash{}, fmt.Errorf("%s is dynamically linked (interpreter %q, needs %v): build it with CGO_ENABLED=0 or use --glibc", s.binary, info.interp, info.needed)
		}
		fs.addFile("/etc/passwd", 0o644, []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonRootID, nonRootID)))
		fs.addFile("/etc/group", 0o644, []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", nonRootID)))
	case kindGlibc:
		if info.dynamic() {
			if err := addSharedLibraries(fs, sysroot, info); err != nil {
				return "", v1.Hash{}, err
			}
		} else {
			// A binary without cgo cannot dlopen anything; the image still works, it just has no libc.
			fmt.Fprintf(os.Stderr, "images: warning: %s (--glibc %s) is statically linked; no shared libraries copied\n", s.binary, s.name)
		}
		fs.addFile("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n"))
		fs.addFile("/etc/group", 0o644, []byte("root:x:0:\n"))
		user = "0:0"
		env = append(env, "LD_LIBRARY_PATH="+driverPaths)
	}
	if ca, err := os.ReadFile(filepath.Join(sysroot, caBundle)); err == nil {
		fs.addFile(caBundle, 0o644, ca)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", v1.Hash{}, fmt.Errorf("read CA bundle: %w", err)
	}
	layerTar, err := fs.tar()
	if err != nil {
		return "", v1.Hash{}, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "hack/images", Comment: s.name,
	}})
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("append layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Created = info.arch, "linux", v1.Time{Time: epoch}
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{exe},
		Env:        env,
		WorkingDir: "/",
		Labels: map[string]string{
			"org.opencontainers.image.title":  s.name,
			"org.opencontainers.image.source": "https://github.com/cardinal-gpu/cardinal",
		},
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", v1.Hash{}, fmt.Errorf("config: %w", err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", v1.Hash{}, fmt.Errorf("digest: %w", err)
	}
	dst := filepath.Join(out, s.name+".tar")
	if err := writeArchive(img, ref, dst); err != nil {
		return "", v1.Hash{}, err
	}
	return dst, digest, nil
}

// writeArchive writes img as an OCI image layout with a Docker manifest.json into one tar file.
func writeArchive(img v1.Image, ref, dst string) error {
	dir, err := os.MkdirTemp("", "cardinal-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag,
	})); err != nil {
		return fmt.Errorf("OCI layout: %w", err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	type dockerManifest struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	dm := []dockerManifest{{Config: blobPath(cfg), RepoTags: []string{ref}}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		dm[0].Layers = append(dm[0].Layers, blobPath(d))
	}
	mj, err := json.Marshal(dm)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), mj, 0o644); err != nil {
		return err
	}
	return tarDir(dir, dst)
}

func blobPath(h v1.Hash) string { return path.Join("blobs", h.Algorithm, h.Hex) }

// tarDir writes the regular files under dir into dst, sorted, with fixed owners and times.
func tarDir(dir, dst string) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	tmp := dst + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil {
			f.Close()
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: 0o644, Size: int64(len(b)), ModTime: epoch, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(b); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// elfInfo is what the image needs to know about a binary.
type elfInfo struct {
	arch   string
	interp string   // PT_INTERP, empty for a static binary
	needed []string // DT_NEEDED
	class  elf.Class
}

func (e elfInfo) dynamic() bool { return e.interp != "" || len(e.needed) > 0 }

func inspectELF(b []byte) (elfInfo, error) {
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		return elfInfo{}, fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	var info elfInfo
	info.class = f.Class
	switch f.Machine {
	case elf.EM_X86_64:
		info.arch = "amd64"
	case elf.EM_AARCH64:
		info.arch = "arm64"
	default:
		return elfInfo{}, fmt.Errorf("unsupported machine %s", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		data, err := io.ReadAll(p.Open())
		if err != nil {
			return elfInfo{}, fmt.Errorf("read PT_INTERP: %w", err)
		}
		info.interp = strings.TrimRight(string(data), "\x00")
	}
	info.needed, err = f.ImportedLibraries()
	if err != nil {
		return elfInfo{}, fmt.Errorf("read DT_NEEDED: %w", err)
	}
	return info, nil
}

// libDirs are where glibc's loader looks without an ld.so.cache, per architecture (Debian multiarch
// first, then the plain and lib64 layouts of other distributions).
func libDirs(arch string) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[arch]
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}
}

// addSharedLibraries copies the binary's interpreter and every library it needs, transitively, plus
// dlopenLibs, from sysroot into fs, each as a regular file at the path the loader will open.
func addSharedLibraries(fs *fileSet, sysroot string, info elfInfo) error {
	if info.interp == "" {
		return errors.New("dynamic binary without PT_INTERP")
	}
	if err := fs.addHostFile(sysroot, info.interp); err != nil {
		return fmt.Errorf("ELF interpreter: %w", err)
	}
	queue := append(append([]string(nil), info.needed...), dlopenLibs...)
	seen := map[string]bool{}
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		if seen[lib] {
			continue
		}
		seen[lib] = true
		found := ""
		for _, d := range libDirs(info.arch) {
			if _, err := os.Stat(filepath.Join(sysroot, d, lib)); err == nil {
				found = path.Join(d, lib)
				break
			}
		}
		if found == "" {
			return fmt.Errorf("shared library %s not found under %s in %v", lib, sysroot, libDirs(info.arch))
		}
		b, err := os.ReadFile(filepath.Join(sysroot, found))
		if err != nil {
			return err
		}
		li, err := inspectELF(b)
		if err != nil {
			return fmt.Errorf("%s: %w", found, err)
		}
		if err := fs.addHostFile(sysroot, found); err != nil {
			return err
		}
		queue = append(queue, li.needed...)
	}
	return nil
}

// fileSet is the content of one layer.
type fileSet struct {
	files map[string]fileEntry
}

type fileEntry struct {
	mode int64
	data []byte
}

func newFileSet() *fileSet { return &fileSet{files: map[string]fileEntry{}} }

func (fs *fileSet) addFile(p string, mode int64, data []byte) {
	fs.files[path.Clean("/"+p)] = fileEntry{mode: mode, data: data}
}

// addHostFile copies sysroot/p (following symlinks) to p.
func (fs *fileSet) addHostFile(sysroot, p string) error {
	full := filepath.Join(sysroot, p)
	st, err := os.Stat(full)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(full)
	if err != nil {
		return err
	}
	fs.addFile(p, int64(st.Mode().Perm()), b)
	return nil
}

// tar renders the set as an uncompressed tar: parent directories first, then everything sorted.
func (fs *fileSet) tar() ([]byte, error) {
	dirs := map[string]bool{}
	for p := range fs.files {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	type entry struct {
		name string
		dir  bool
	}
	var entries []entry
	for d := range dirs {
		entries = append(entries, entry{name: d, dir: true})
	}
	for p := range fs.files {
		entries = append(entries, entry{name: p})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		name := strings.TrimPrefix(e.name, "/")
		hdr := &tar.Header{Name: name, ModTime: epoch, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		if e.dir {
			hdr.Typeflag, hdr.Name, hdr.Mode = tar.TypeDir, name+"/", 0o755
		} else {
			f := fs.files[e.name]
			hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, f.mode, int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("tar %s: %w", name, err)
		}
		if !e.dir {
			if _, err := tw.Write(fs.files[e.name].data); err != nil {
				return nil, fmt.Errorf("tar %s: %w", name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
