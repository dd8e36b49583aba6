#!/usr/bin/env bash
# Build the pinned Kueue manager from source into OUT (default: .controlplane/bin) as `kueue`, and copy its
# manifests (config/components: CRDs, RBAC, webhook configurations) from the same module version into
# OUT/../kueue/components, where `localcluster up --kueue` reads them. The version is the one
# controlplane/kueue/go.mod pins. Does nothing when the binary and the manifests are already there and
# are of that version.
#
# Kueue is a module of its own with its own dependencies (k8s.io/* two minors behind the API server),
# so it has its own go.mod rather than a line in controlplane/kubernetes/go.mod. The Go module and build
# caches stay where Go keeps them (GOMODCACHE, GOCACHE: under $HOME by default), outside the checkout.
# docs/real-apiserver.md says what this costs, cold and warm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.controlplane/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
manifests=$(dirname "$out")/kueue

if ! command -v go >/dev/null; then
	echo "error: 'go' is not on PATH. Kueue is built from source with Go $(sed -n 's/^go //p' "$here/kueue/go.mod") or newer: https://go.dev/dl/" >&2
	echo "  then: make kueue. (Without it the tests against a real Kueue are skipped, and say so.)" >&2
	exit 1
fi

version=$(cd "$here/kueue" && go list -m -f '{{.Version}}' sigs.k8s.io/kueue)

# A binary built by `go build` records the module versions it was built from; the manifests carry a stamp.
up_to_date() {
	local info
	[ -x "$out/kueue" ] && info=$(go version -m "$out/kueue" 2>/dev/null) || return 1
	# `mod` (Go reports the main package's module so when it is built as a tool), or `dep`.
	grep -qP "^\t(mod|dep)\tsigs\.k8s\.io/kueue\t\Q$version\E\t" <<<"$info" || return 1
	[ "$(cat "$manifests/VERSION" 2>/dev/null)" = "$version" ]
}

if up_to_date; then
	echo "kueue: $version already in $out (manifests in $manifests)"
	exit 0
fi

echo "kueue: building the Kueue manager $version into $out (cold: about 8 minutes on 2 CPUs, see docs/real-apiserver.md)"
# Without these the manager logs gitVersion v0.0.0-main (the module zip is not a git checkout).
ldflags="-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version -X sigs.k8s.io/kueue/pkg/version.GitCommit=go-module-$version"

staging=$(mktemp -d "$out/.build-kueue.XXXXXX")
trap 'rm -rf "$staging"' EXIT
start=$(date +%s)
# Static, as Kueue's own image builds it (its Makefile's CGO_ENABLED defaults to 0).
(cd "$here/kueue" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$staging/kueue" sigs.k8s.io/kueue/cmd/kueue)
echo "kueue: built in $(( $(date +%s) - start )) s"

# The manifests of the very module version the binary was built from, read-only in the module cache.
src=$(cd "$here/kueue" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)
mkdir -p "$staging/manifests"
cp -R "$src/config/components" "$staging/manifests/components"
chmod -R u+w "$staging/manifests"
echo "$version" >"$staging/manifests/VERSION"

mv -f "$staging/kueue" "$out/kueue"
rm -rf "$manifests"
mv "$staging/manifests" "$manifests"
ls -l "$out/kueue"
up_to_date || { echo "error: $out/kueue or $manifests is not Kueue $version" >&2; exit 1; }
