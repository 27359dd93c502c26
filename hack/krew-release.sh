#!/usr/bin/env bash
# Release step of the krew plugin (plugins/krew/cardinal.yaml): builds kubectl-cardinal for every
# platform the manifest lists, packs each as _output/krew/kubectl-cardinal_<os>_<arch>.tar.gz (the
# binary, and LICENSE when the repository has one), and writes _output/krew/cardinal.yaml with
# spec.version, each uri and each sha256 filled for VERSION. Usage: bash hack/krew-release.sh vX.Y.Z
set -euo pipefail

main() {
	local version=${1:?usage: hack/krew-release.sh vX.Y.Z}
	[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+ ]] || { echo "krew-release: version $version: want vX.Y.Z" >&2; return 1; }
	local root out manifest
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	out=$root/_output/krew
	manifest=$root/plugins/krew/cardinal.yaml
	rm -rf "$out" && mkdir -p "$out"
	cp "$manifest" "$out/cardinal.yaml"
	local old
	old=$(awk '$1 == "version:" { print $2; exit }' "$manifest")
	sed -i "s|^  version: $old\$|  version: $version|; s|/download/$old/|/download/$version/|" "$out/cardinal.yaml"
	local platform os arch exe dir archive sum
	for platform in $(awk '/os: / { os = $2 } /arch: / { print os "/" $2 }' "$manifest"); do
		os=${platform%/*} arch=${platform#*/} exe=kubectl-cardinal
		[ "$os" = windows ] && exe=kubectl-cardinal.exe
		dir=$(mktemp -d)
		(cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch go build -trimpath -o "$dir/$exe" ./cmd/kubectl-cardinal)
		[ -f "$root/LICENSE" ] && cp "$root/LICENSE" "$dir/"
		archive=kubectl-cardinal_${os}_${arch}.tar.gz
		tar -C "$dir" -czf "$out/$archive" .
		rm -rf "$dir"
		sum=$(sha256sum "$out/$archive" | cut -d' ' -f1)
		# The sha256 line follows the platform's uri line.
		sed -i "/\/$archive\$/{n;s|sha256: \".*\"|sha256: \"$sum\"|}" "$out/cardinal.yaml"
		echo "$archive $sum"
	done
	echo "$out/cardinal.yaml"
}

main "$@"
