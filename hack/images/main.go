// Command images assembles Cardinal's container images as OCI image tarballs from binaries built on
// this machine, without a container engine or a registry (go-containerregistry writes them).
//
//	go run . --out ../../bin/images --tag v0.1.0 \
//	  --static scheduler-extender=../../bin/images/scheduler-extender \
//	  --static webhook=../../bin/images/webhook \
//	  --glibc device-plugin=../../bin/images/device-plugin
//
// Each <name>.tar is an OCI image layout (oci-layout, index.json, blobs/) that also carries a Docker
// manifest.json, the format `docker save` writes since Docker 25: `docker load`, `podman load`,
// `ctr images import`, `kind load image-archive`, `skopeo copy oci-archive:` and `crane push` read it.
//
// Two kinds of image, one layer each:
//   - --static: a statically linked binary, non-root (uid/gid 65532), with /etc/passwd, /etc/group and
//     the build host's CA bundle; nothing else (no shell, no libc).
//   - --glibc: a dynamically linked cgo binary with its ELF interpreter and every shared library it
//     needs (followed transitively through DT_NEEDED) copied from the build host, plus the glibc
//     libraries a dlopen'ed NVIDIA driver library needs (libdl, libpthread, libm, librt). It runs as
//     root: the device plugin writes into the kubelet's root-owned directories.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	var opts options
	flag.StringVar(&opts.out, "out", "", "folder the <name>.tar files are written to (created)")
	flag.StringVar(&opts.repository, "repository", "ghcr.io/cardinal-gpu", "registry/namespace the images are named under: <repository>/<name>:<tag>")
	flag.StringVar(&opts.tag, "tag", "dev", "tag of every image")
	flag.Var(&opts.static, "static", "name=path of a static binary (repeatable): a non-root image with only the binary, passwd and CA certs")
	flag.Var(&opts.glibc, "glibc", "name=path of a dynamically linked binary (repeatable): an image with its glibc libraries from this host, run as root")
	flag.StringVar(&opts.sysroot, "sysroot", "/", "root of the file system the shared libraries and CA bundle are copied from")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: go run ./hack/images --out DIR [--static name=path]... [--glibc name=path]...\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

type options struct {
	out, repository, tag, sysroot string
	static, glibc                 namedPaths
}

func (o options) validate() error {
	switch {
	case o.out == "":
		return errors.New("--out is empty")
	case o.tag == "" || strings.ContainsAny(o.tag, ":/@ "):
		return fmt.Errorf("--tag %q is not a valid tag", o.tag)
	case len(o.static)+len(o.glibc) == 0:
		return errors.New("no image: give --static or --glibc")
	}
	return nil
}

func run(o options) error {
	if err := o.validate(); err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", o.out, err)
	}
	specs := make([]imageSpec, 0, len(o.static)+len(o.glibc))
	for _, np := range o.static {
		specs = append(specs, imageSpec{name: np.name, binary: np.path, kind: kindStatic})
	}
	for _, np := range o.glibc {
		specs = append(specs, imageSpec{name: np.name, binary: np.path, kind: kindGlibc})
	}
	for _, s := range specs {
		ref := fmt.Sprintf("%s/%s:%s", strings.TrimSuffix(o.repository, "/"), s.name, o.tag)
		path, digest, err := build(s, ref, o.sysroot, o.out)
		if err != nil {
			return fmt.Errorf("image %s: %w", s.name, err)
		}
		fmt.Printf("%s\t%s\t%s\n", ref, digest, path)
	}
	return nil
}

// namedPaths is a repeatable name=path flag.
type namedPaths []namedPath

type namedPath struct{ name, path string }

func (n *namedPaths) String() string {
	parts := make([]string, len(*n))
	for i, p := range *n {
		parts[i] = p.name + "=" + p.path
	}
	return strings.Join(parts, ",")
}

func (n *namedPaths) Set(s string) error {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" || strings.ContainsAny(name, ":/@ ") {
		return fmt.Errorf("%q is not name=path", s)
	}
	*n = append(*n, namedPath{name: name, path: path})
	return nil
}
