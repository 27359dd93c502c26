#!/usr/bin/env bash
# Builds the pinned test-bed binaries (etcd, kube-apiserver, kube-scheduler, kubelet, kubectl, helm)
# from the Go module proxy into .cache/testbed/<key>/, where <key> names every version. A second run
# finds them there and builds nothing. Prints the folder on its last line. Concurrent runs (two test
# packages at once) wait for each other on a lock instead of building twice.
#
# Everything is inside main, called on the last line: bash then parses the whole file before it runs
# any of it, so editing this script while a build is running cannot break that build.
set -euo pipefail

# helm_ldflags: the stamps helm's own Makefile sets in a release build of a tag: the version, no
# "unreleased" metadata, a clean tree, and the Kubernetes version helm assumes when it talks to no
# cluster (helm template, helm lint) taken from the k8s.io/client-go of helm's go.mod (v0.34.2 gives
# 1.34), for both chartutil (.Capabilities.KubeVersion) and the lint rules (deprecations). Without them
# helm assumes v1.20.0 and refuses charts that need more. gitCommit stays empty: the module proxy does
# not say which commit the tag is.
helm_ldflags() {
	local mod client major minor ld
	mod=$(cd "$root/hack/testbed" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	client=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$mod")
	[ -n "$client" ] || { echo "testbed: no k8s.io/client-go in $mod" >&2; return 1; }
	client=${client#v}
	major=$((${client%%.*} + 1))
	minor=${client#*.}; minor=${minor%%.*}
	ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
	ld+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
	for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
		ld+=" -X $p.k8sVersionMajor=$major -X $p.k8sVersionMinor=$minor"
	done
	echo "$ld"
}

main() {
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	K8S_VERSION=v1.34.4
	ETCD_VERSION=v3.5.21
	HELM_VERSION=v3.19.5
	# HELM_BUILD names how helm is built: bump it when the build changes, so caches built the old way
	# get a new folder (their Kubernetes and etcd binaries are reused, see reuse_siblings). "stamped":
	# the version stamps of a release build (helm_ldflags).
	HELM_BUILD=stamped
	cache="${TESTBED_CACHE:-$root/.cache/testbed}"
	prefix="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_"
	key="${prefix}helm-${HELM_VERSION}-${HELM_BUILD}"
	out="$cache/$key"
	bins=(etcd kube-apiserver kube-scheduler kubelet kubectl helm)
	if [ "${1:-}" = "--print-dir" ]; then
		echo "$out"
		exit 0
	fi

	have_all() {
		for b in "${bins[@]}"; do [ -x "$out/$b" ] || return 1; done
	}
	if have_all; then
		echo "$out"
		exit 0
	fi
	mkdir -p "$out"
	if command -v flock >/dev/null; then
		exec 9>"$out/.lock"
		flock 9
		if have_all; then # built by the run we waited for
			echo "$out"
			exit 0
		fi
	fi
	export CGO_ENABLED=0 GOFLAGS=-buildvcs=false

	# Kubernetes and etcd binaries depend only on their versions: take them from another folder of
	# the same versions (one built with another helm build), waiting for a build running there.
	reuse_siblings() {
		local sib b
		for sib in "$cache/$prefix"*; do
			[ "$sib" != "$out" ] && [ -d "$sib" ] || continue
			if [ -e "$sib/.lock" ] && command -v flock >/dev/null; then
				flock -w 1200 "$sib/.lock" true || true
			fi
			for b in "${bins[@]}"; do
				[ "$b" != helm ] && [ ! -x "$out/$b" ] && [ -x "$sib/$b" ] || continue
				echo "testbed: reusing $b from $sib" >&2
				ln "$sib/$b" "$out/$b" 2>/dev/null || cp "$sib/$b" "$out/$b"
			done
		done
	}
	reuse_siblings

	minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
	done

	build_k8s() {
		local b=$1
		[ -x "$out/$b" ] && return 0
		echo "testbed: building $b $K8S_VERSION" >&2
		(cd "$root/hack/testbed" && go build -trimpath -ldflags "$ld" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
		mv "$out/$b.tmp" "$out/$b"
	}
	for b in kube-apiserver kube-scheduler kubelet kubectl; do build_k8s "$b"; done

	if [ ! -x "$out/etcd" ]; then
		echo "testbed: building etcd $ETCD_VERSION" >&2
		(cd "$root/hack/etcd" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" .)
		mv "$out/etcd.tmp" "$out/etcd"
	fi
	if [ ! -x "$out/helm" ]; then
		echo "testbed: building helm $HELM_VERSION" >&2
		local hld
		hld=$(helm_ldflags) # its own statement, so that set -e stops the build when it fails
		GOBIN="$out/.helm" go install -trimpath -ldflags "$hld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
		mv "$out/.helm/helm" "$out/helm" && rmdir "$out/.helm"
	fi
	have_all
	echo "$out"
}

main "$@"
