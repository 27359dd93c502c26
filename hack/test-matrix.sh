#!/usr/bin/env bash
# The compatibility matrix (make test-matrix): for every supported Kubernetes minor (newest first), the
# real-cluster tests (./test/...: end to end, topology scenarios, chart install, integration) and the
# demo with Helm 3, then the chart tests (render, lint, install/upgrade/uninstall) with each other Helm
# major. Each leg's wall time and result are printed as a table at the end; a failing leg does not stop
# the others, but makes the run fail.
#
#   MATRIX_K8S="1.37 1.36"  the minors (default: hack/testbed/build.sh --list)
#   MATRIX_HELM="3 4"       the Helm majors (default: 3 4; the first one runs the full legs)
#   TEST_FLAGS              extra go test flags (e.g. -run 'TestCardinal$')
#
# Needs root (real kubelets) and, on a cold cache, ~10 minutes per minor to build its binaries.
set -uo pipefail

main() {
	local root
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	cd "$root" || exit 1
	local minors helms k h first dir start rc status=0 go=${GO:-go}
	minors=${MATRIX_K8S:-$(bash hack/testbed/build.sh --list | awk '{ print $1 }')}
	helms=${MATRIX_HELM:-3 4}
	first=${helms%% *}
	local -a rows=()
	# leg runs one leg ("name" then the command) and records its wall time and exit status.
	leg() {
		local name=$1
		shift
		echo "== $name: $*"
		start=$(date +%s)
		"$@"
		rc=$?
		rows+=("$(printf '%-28s %6ss  %s' "$name" "$(($(date +%s) - start))" "$([ $rc = 0 ] && echo ok || echo "FAIL ($rc)")")")
		[ $rc = 0 ] || status=1
	}
	leg "build (cardinal binaries)" make build
	for k in $minors; do
		for h in $helms; do
			leg "testbed $k helm $h" bash hack/testbed/build.sh --k8s "$k" --helm "$h"
		done
		dir=$(bash hack/testbed/build.sh --print-dir --k8s "$k" --helm "$first")
		# shellcheck disable=SC2086 # TEST_FLAGS is a list of flags
		leg "$k helm $first ./test/..." env CARDINAL_TESTBED_BIN="$dir" "$go" test -count=1 -timeout 60m ${TEST_FLAGS:-} ./test/...
		leg "$k helm $first demo" env CARDINAL_TESTBED_BIN="$dir" "$go" run ./hack/demo --bin "$root/bin"
		for h in $helms; do
			[ "$h" = "$first" ] && continue
			dir=$(bash hack/testbed/build.sh --print-dir --k8s "$k" --helm "$h")
			# shellcheck disable=SC2086
			leg "$k helm $h ./test/chart" env CARDINAL_TESTBED_BIN="$dir" "$go" test -count=1 -timeout 30m ${TEST_FLAGS:-} ./test/chart/...
		done
	done
	echo
	echo "test-matrix: $(date -u +%FT%TZ), $(nproc) CPUs"
	printf '%s\n' "${rows[@]}"
	return $status
}

main "$@"
exit  # nothing after main is read: an edit made while this runs cannot append to it
