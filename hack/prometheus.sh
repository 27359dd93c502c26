#!/usr/bin/env bash
# Puts Debian's prometheus binary in .cache/prometheus/ for the dashboard test (test/e2e
# TestDashboard) and prints its path on the last line. The package is downloaded and unpacked
# (apt-get download, dpkg-deb -x), not installed: no service starts and nothing outside the folder
# changes. A second run finds the binary and does nothing. Needs Debian's apt (root only for the
# `apt-get update` a fresh machine without package lists needs).
set -euo pipefail

main() {
	local root dir bin deb
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	dir=$root/.cache/prometheus
	bin=$dir/usr/bin/prometheus
	if [ -x "$bin" ]; then
		echo "$bin"
		return
	fi
	mkdir -p "$dir/deb"
	if ! (cd "$dir/deb" && apt-get download prometheus >&2); then
		apt-get update >&2
		(cd "$dir/deb" && apt-get download prometheus >&2)
	fi
	deb=$(ls "$dir"/deb/prometheus_*.deb | head -n 1)
	dpkg-deb -x "$deb" "$dir"
	rm -rf "$dir/deb"
	"$bin" --version >&2
	echo "$bin"
}

main "$@"
