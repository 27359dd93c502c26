#!/usr/bin/env bash
# Writes hack/testbed/k8s-1.<minor>/, the small module build.sh builds Kubernetes v<version> from:
# k8s.io/kubernetes at that version, every staging module it replaces with a local path replaced in
# turn with its published v0.<minor>.<patch> build, and go.sum filled in; and, given an etcd version,
# hack/etcd/<etcd version>/, the module build.sh builds that etcd server from. Run it to add a minor or
# move a minor to a new patch, then pin both versions in build.sh's K8S_PINS.
#
#   bash hack/testbed/add-minor.sh v1.37.2 [v3.7.0]
set -euo pipefail

main() {
	local version=${1:?usage: add-minor.sh v1.MINOR.PATCH}
	[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "add-minor: want v1.MINOR.PATCH, got $version" >&2; exit 2; }
	local minor=${BASH_REMATCH[1]} patch=${BASH_REMATCH[2]}
	local root dir gomod gover
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	dir="$root/hack/testbed/k8s-1.$minor"
	mkdir -p "$dir"
	export GOFLAGS=-mod=mod
	gomod=$(go mod download -json "k8s.io/kubernetes@$version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$gomod" ] || { echo "add-minor: the module proxy has no k8s.io/kubernetes $version" >&2; exit 1; }
	gover=$(awk '$1 == "go" { print $2; exit }' "$gomod")
	{
		echo "// Module k8s-1.$minor builds Kubernetes $version for Cardinal's test bed (hack/testbed/build.sh)."
		echo "// Written by hack/testbed/add-minor.sh; kept out of the project's main go.mod: k8s.io/kubernetes"
		echo "// cannot be a normal dependency (its go.mod replaces every staging module with a local path)."
		echo "module github.com/cardinal-gpu/cardinal/hack/testbed/k8s-1.$minor"
		echo
		echo "go $gover"
		echo
		awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print $1 }' "$gomod" | while read -r m; do
			echo "replace $m => $m v0.$minor.$patch"
			echo
		done
		echo "require k8s.io/kubernetes $version"
	} >"$dir/go.mod"
	cat >"$dir/tools.go" <<GO
//go:build tools

// Package testbed pins the Kubernetes commands hack/testbed/build.sh builds at $version.
package testbed

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
	# -e: some staging modules (sample-*) are never imported; tidy must not drop the replaces' targets
	# that are, nor upgrade k8s.io/kubernetes (every requirement is pinned above).
	(cd "$dir" && go mod tidy -e)
	echo "$dir"
	[ -n "${2:-}" ] && add_etcd "$root" "$2"
	return 0
}

# add_etcd writes hack/etcd/<version>/: etcdmain of go.etcd.io/etcd/server/v3 at that version.
add_etcd() {
	local root=$1 version=$2 dir
	dir="$root/hack/etcd/$version"
	mkdir -p "$dir"
	cat >"$dir/go.mod" <<MOD
// Module etcd builds etcd $version for Cardinal's test bed (hack/testbed/build.sh), kept out of the main
// go.mod. Written by hack/testbed/add-minor.sh.
module github.com/cardinal-gpu/cardinal/hack/etcd/$version

go 1.24.0

require go.etcd.io/etcd/server/v3 $version
MOD
	cat >"$dir/main.go" <<GO
// Command etcd is the etcd server at the version pinned in go.mod, for the test bed only.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
	(cd "$dir" && go mod tidy)
	echo "$dir"
}

main "$@"
exit  # nothing after main is read: an edit made while this runs cannot append to it
