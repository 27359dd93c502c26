#!/usr/bin/env bash
# Builds the pinned test-bed binaries (etcd, kube-apiserver, kube-scheduler, kubelet, kubectl, helm)
# from the Go module proxy into .cache/testbed/<key>/, where <key> names every version. A second run
# finds them there and builds nothing. Prints the folder on its last line. Concurrent runs (two test
# packages at once) wait for each other on a lock instead of building twice.
#
# Everything is inside main, called on the last line: bash then parses the whole file before it runs
# any of it, so editing this script while a build is running cannot break that build.
set -euo pipefail

main() {
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	K8S_VERSION=v1.34.4
	ETCD_VERSION=v3.5.21
	HELM_VERSION=v3.19.5
	key="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_helm-${HELM_VERSION}"
	out="${TESTBED_CACHE:-$root/.cache/testbed}/$key"
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
		GOBIN="$out/.helm" go install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
		mv "$out/.helm/helm" "$out/helm" && rmdir "$out/.helm"
	fi
	have_all
	echo "$out"
}

main "$@"
