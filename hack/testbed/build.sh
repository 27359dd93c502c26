#!/usr/bin/env bash
# Builds the test-bed binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kubectl, helm) of one supported Kubernetes minor and one Helm major from the Go module proxy into .cache/testbed/<key>/,
# where <key> names every version. A second run finds them there and builds nothing. Prints the folder
# on its last line. Concurrent runs (two test packages at once) wait for each other on a lock instead
# of building twice.
#
#   hack/testbed/build.sh [--k8s 1.37] [--helm 4] [--print-dir] [--list]
#   hack/testbed/build.sh --kueue [--print-dir]
#
# --k8s (or $CARDINAL_K8S_VERSION) picks the Kubernetes minor: 1.37, v1.37 or its pinned patch v1.37.2;
# the default is K8S_DEFAULT. --helm (or $CARDINAL_HELM_VERSION) picks Helm 3 or 4 (or its pinned
# version); the default is 3. --print-dir prints the folder without building; --list prints the
# supported minors, newest first, with their pinned Kubernetes and etcd versions.
#
# Each minor is built from its own small module, hack/testbed/k8s-1.<minor>/ (hack/testbed/add-minor.sh
# writes one), and etcd from hack/etcd/<etcd version>/. A folder built before a binary joined the list
# (kube-controller-manager did) is completed in place: only the missing binaries are built.
#
# --kueue builds Kueue's manager (KUEUE_VERSION, from its own module hack/kueue/<version>/) into
# .cache/testbed/kueue-<version>/ instead, beside copies of its CRDs (crds/) and webhook
# configurations (webhooks.yaml) taken from the module, so the tests need no module cache; it prints
# that folder. Kueue does not depend on the Kubernetes minor: one folder serves them all.
#
# Everything is inside main, called on the last line: bash then parses the whole file before it runs
# any of it, so editing this script while a build is running cannot break that build.
set -euo pipefail

# K8S_PINS: every supported minor, newest first: its pinned patch and the
# etcd it is tested with, the one the release pins (build/dependencies.yaml) where the module proxy
# serves it, else the nearest patch it serves (1.35 pins 3.6.6: not served; 3.6.5 is its etcd client's).
K8S_PINS=(
	"1.37 v1.37.2 v3.7.0"
	"1.36 v1.36.3 v3.6.8"
	"1.35 v1.35.4 v3.6.5"
	"1.34 v1.34.4 v3.5.21"
)
# K8S_SUPPORTED: how many of K8S_PINS' first rows are supported (the three minors upstream supports);
# the rows after them stay buildable (--k8s) for comparison, outside --list and the matrix.
K8S_SUPPORTED=3
# K8S_DEFAULT: the minor built when none is asked for: the newest one `make test` is green on.
K8S_DEFAULT=1.37
# HELM_PINS: every supported Helm major, the first the default: its pinned version.
HELM_PINS=(
	"3 v3.19.5"
	"4 v4.3.1"
)
# KUEUE_VERSION: the Kueue the end-to-end tests run beside Cardinal (test/e2e/kueue_test.go).
KUEUE_VERSION=v0.17.0

# pick prints the row of pins (a K8S_PINS or HELM_PINS row) whose first or second field is want, with
# or without a leading v; an empty want picks the first row.
pick() {
	local what=$1 want=${2#v} row f
	shift 2
	local rows=("$@") names=()
	for row in "${rows[@]}"; do
		read -r -a f <<<"$row"
		names+=("${f[0]}")
		if [ -z "$want" ] || [ "$want" = "${f[0]}" ] || [ "$want" = "${f[1]#v}" ]; then
			echo "$row"
			return 0
		fi
	done
	echo "testbed: unsupported $what version $want; supported: ${names[*]}" >&2
	return 1
}

# helm_ldflags: the stamps helm's own Makefile sets in a release build of a tag: the version, no
# "unreleased" metadata, a clean tree. Helm 3 also needs the Kubernetes version it assumes when it
# talks to no cluster (helm template, helm lint) taken from the k8s.io/client-go of helm's go.mod
# (v0.34.2 gives 1.34), for both chartutil (.Capabilities.KubeVersion) and the lint rules
# (deprecations); without them helm 3 assumes v1.20.0 and refuses charts that need more. Helm 4 reads
# it from the binary's build information itself. gitCommit stays empty: the module proxy does not say
# which commit the tag is.
helm_ldflags() {
	local mod client major minor ld
	ld="-s -w -X helm.sh/helm/$HELM_MAJOR/internal/version.version=$HELM_VERSION"
	ld+=" -X helm.sh/helm/$HELM_MAJOR/internal/version.gitTreeState=clean"
	if [ "$HELM_MAJOR" = v3 ]; then
		mod=$(cd "$root/hack/testbed" && go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
		client=$(awk '$1 == "k8s.io/client-go" { print $2 }' "$mod")
		[ -n "$client" ] || { echo "testbed: no k8s.io/client-go in $mod" >&2; return 1; }
		client=${client#v}
		major=$((${client%%.*} + 1))
		minor=${client#*.}; minor=${minor%%.*}
		for p in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
			ld+=" -X $p.k8sVersionMajor=$major -X $p.k8sVersionMinor=$minor"
		done
	fi
	echo "$ld"
}

# build_kueue [PRINT_DIR]: build Kueue's manager into $cache/kueue-$KUEUE_VERSION unless it is there
# (with PRINT_DIR, only print the folder), and print the folder on the last line. The binary is moved
# into place last, after the CRDs and webhook manifests: a folder holding it is complete.
build_kueue() {
	local out="$cache/kueue-$KUEUE_VERSION" mod="$root/hack/kueue/$KUEUE_VERSION" src start
	if [ -n "${1:-}" ] || [ -x "$out/kueue" ]; then
		echo "$out"
		return 0
	fi
	mkdir -p "$out"
	if command -v flock >/dev/null; then
		exec 8>"$out/.lock"
		flock 8
		if [ -x "$out/kueue" ]; then # built by the run we waited for
			echo "$out"
			return 0
		fi
	fi
	[ -f "$mod/go.mod" ] || { echo "testbed: $mod/go.mod missing" >&2; exit 1; }
	grep -q "^require sigs.k8s.io/kueue $KUEUE_VERSION\$" "$mod/go.mod" || { echo "testbed: $mod/go.mod does not pin sigs.k8s.io/kueue $KUEUE_VERSION" >&2; exit 1; }
	start=$SECONDS
	echo "testbed: building kueue $KUEUE_VERSION into $out, once (about 4 minutes on 2 cores; cached after)" >&2
	export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
	(cd "$mod" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION" -o "$out/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue)
	# go list -m names the module's folder only once it is in the module cache (a fresh one has it
	# only after a download; the build above fetched it too).
	(cd "$mod" && go mod download sigs.k8s.io/kueue)
	src=$(cd "$mod" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
	[ -n "$src" ] && [ -d "$src/config/components/crd/bases" ] || { echo "testbed: no config/components/crd/bases in sigs.k8s.io/kueue's folder ($src)" >&2; exit 1; }
	rm -rf "$out/crds" && mkdir -p "$out/crds"
	cp "$src"/config/components/crd/bases/*.yaml "$out/crds/"
	cp "$src/config/components/webhook/manifests.yaml" "$out/webhooks.yaml"
	chmod -R u+w "$out/crds" "$out/webhooks.yaml" # the module cache is read-only
	mv "$out/kueue.tmp" "$out/kueue"
	echo "testbed: built kueue in $((SECONDS - start)) s" >&2
	echo "$out"
}

main() {
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
	local want_k8s=${CARDINAL_K8S_VERSION:-} want_helm=${CARDINAL_HELM_VERSION:-} print_dir= kueue= row
	while [ $# -gt 0 ]; do
		case $1 in
		--k8s) want_k8s=${2:?--k8s needs a version}; shift 2 ;;
		--k8s=*) want_k8s=${1#*=}; shift ;;
		--helm) want_helm=${2:?--helm needs a version}; shift 2 ;;
		--helm=*) want_helm=${1#*=}; shift ;;
		--print-dir) print_dir=1; shift ;;
		--kueue) kueue=1; shift ;;
		--list)
			for row in "${K8S_PINS[@]:0:K8S_SUPPORTED}"; do
				set -- $row
				echo "$1 $2 etcd-$3"
			done
			exit 0 ;;
		*) echo "testbed: unknown argument $1 (want --k8s MINOR, --helm MAJOR, --kueue, --print-dir, --list)" >&2; exit 2 ;;
		esac
	done
	cache="${TESTBED_CACHE:-$root/.cache/testbed}"
	if [ -n "$kueue" ]; then
		build_kueue "$print_dir"
		exit 0
	fi
	row=$(pick Kubernetes "${want_k8s:-$K8S_DEFAULT}" "${K8S_PINS[@]}")
	read -r K8S_MINOR K8S_VERSION ETCD_VERSION <<<"$row"
	row=$(pick Helm "$want_helm" "${HELM_PINS[@]}")
	read -r HELM_MAJOR HELM_VERSION <<<"$row"
	HELM_MAJOR=v$HELM_MAJOR
	# HELM_BUILD names how helm is built: bump it when the build changes, so caches built the old way
	# get a new folder (their Kubernetes and etcd binaries are reused, see reuse_siblings). "stamped":
	# the version stamps of a release build (helm_ldflags).
	HELM_BUILD=stamped
	prefix="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_"
	helm_suffix="_helm-${HELM_VERSION}-${HELM_BUILD}"
	key="${prefix}helm-${HELM_VERSION}-${HELM_BUILD}"
	out="$cache/$key"
	bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl helm)
	if [ -n "$print_dir" ]; then
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

	# Kubernetes and etcd binaries depend only on their versions, helm only on its own: take them
	# from another folder of the same versions (one built with another helm, or for another
	# Kubernetes), waiting for a build running there.
	reuse_siblings() {
		local sib b
		for sib in "$cache/$prefix"* "$cache/"*"$helm_suffix"; do
			[ "$sib" != "$out" ] && [ -d "$sib" ] || continue
			if [ -e "$sib/.lock" ] && command -v flock >/dev/null; then
				flock -w 1200 "$sib/.lock" true || true
			fi
			for b in "${bins[@]}"; do
				[ ! -x "$out/$b" ] && [ -x "$sib/$b" ] || continue
				case $b in
				helm) [[ $sib == *"$helm_suffix" ]] || continue ;;
				*) [[ $sib == "$cache/$prefix"* ]] || continue ;;
				esac
				echo "testbed: reusing $b from $sib" >&2
				ln "$sib/$b" "$out/$b" 2>/dev/null || cp "$sib/$b" "$out/$b"
			done
		done
	}
	reuse_siblings
	if ! have_all; then
		echo "testbed: building the missing binaries into $out, once (a whole minor takes about 13 minutes on 2 cores; cached after)" >&2
	fi
	# built WHAT START: say how long building WHAT took since SECONDS was START.
	built() { echo "testbed: built $1 in $((SECONDS - $2)) s" >&2; }

	local mod="$root/hack/testbed/k8s-$K8S_MINOR" ld p
	[ -f "$mod/go.mod" ] || { echo "testbed: $mod/go.mod missing (hack/testbed/add-minor.sh $K8S_VERSION writes it)" >&2; exit 1; }
	grep -q "^require k8s.io/kubernetes $K8S_VERSION\$" "$mod/go.mod" || { echo "testbed: $mod/go.mod does not pin k8s.io/kubernetes $K8S_VERSION" >&2; exit 1; }
	ld="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=${K8S_MINOR#1.} -X $p.gitTreeState=clean"
	done

	build_k8s() {
		local b=$1
		[ -x "$out/$b" ] && return 0
		local start=$SECONDS
		echo "testbed: building $b $K8S_VERSION" >&2
		(cd "$mod" && go build -trimpath -ldflags "$ld" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b")
		mv "$out/$b.tmp" "$out/$b"
		built "$b" "$start"
	}
	for b in kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl; do build_k8s "$b"; done

	local start
	if [ ! -x "$out/etcd" ]; then
		start=$SECONDS
		echo "testbed: building etcd $ETCD_VERSION" >&2
		[ -f "$root/hack/etcd/$ETCD_VERSION/go.mod" ] || { echo "testbed: hack/etcd/$ETCD_VERSION/go.mod missing" >&2; exit 1; }
		(cd "$root/hack/etcd/$ETCD_VERSION" && go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" .)
		mv "$out/etcd.tmp" "$out/etcd"
		built etcd "$start"
	fi
	if [ ! -x "$out/helm" ]; then
		start=$SECONDS
		echo "testbed: building helm $HELM_VERSION" >&2
		local hld
		hld=$(helm_ldflags) # its own statement, so that set -e stops the build when it fails
		GOBIN="$out/.helm" go install -trimpath -ldflags "$hld" "helm.sh/helm/$HELM_MAJOR/cmd/helm@$HELM_VERSION"
		mv "$out/.helm/helm" "$out/helm" && rmdir "$out/.helm"
		built helm "$start"
	fi
	have_all
	echo "$out"
}

main "$@"
exit  # nothing after main is read: an edit made while this runs cannot append to it
