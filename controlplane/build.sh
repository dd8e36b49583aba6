#!/usr/bin/env bash
# Build the pinned Kubernetes control plane from source into OUT (default: .controlplane/bin):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl, at the versions the two
# go.mod files beside this script pin (controlplane/kubernetes, controlplane/etcd). Does nothing when
# every binary is already there and reports the pinned version.
#
# The Go module and build caches stay where Go keeps them (GOMODCACHE, GOCACHE: under $HOME by
# default), outside the checkout, so a second checkout on the same machine rebuilds in seconds.
# docs/real-apiserver.md says what this costs, cold and warm.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.controlplane/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ! command -v go >/dev/null; then
	echo "error: 'go' is not on PATH. The control plane is built from source with Go $(sed -n 's/^go //p' "$here/kubernetes/go.mod") or newer: https://go.dev/dl/" >&2
	echo "  then: make controlplane. (make test CONTROLPLANE=skip runs the tests that need no control plane;" >&2
	echo "  the local cluster, make run, needs it.)" >&2
	exit 1
fi

k8s_version=$(cd "$here/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd "$here/etcd" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

# What each binary prints for --version when it is the pinned one.
# Each output is read whole before it is searched: `... | grep -q` under pipefail fails at random when grep
# stops reading early and the writer dies of SIGPIPE.
up_to_date() {
	local printed
	[ -x "$out/etcd" ] && printed=$("$out/etcd" --version 2>/dev/null) || return 1
	grep -qx "etcd Version: ${etcd_version#v}" <<<"$printed" || return 1
	for bin in kube-apiserver kube-controller-manager kube-scheduler; do
		[ -x "$out/$bin" ] && [ "$("$out/$bin" --version 2>/dev/null)" = "Kubernetes $k8s_version" ] || return 1
	done
	[ -x "$out/kubectl" ] && printed=$("$out/kubectl" version --client 2>/dev/null) || return 1
	grep -qx "Client Version: $k8s_version" <<<"$printed" || return 1
}

if up_to_date; then
	echo "control plane: Kubernetes $k8s_version, etcd $etcd_version already in $out"
	exit 0
fi

echo "control plane: building Kubernetes $k8s_version and etcd $etcd_version into $out (cold: about 6 minutes on 2 CPUs, see docs/real-apiserver.md)"
minor=$(echo "$k8s_version" | cut -d. -f2)
# Without these the binaries report v0.0.0-master (the module zip is not a git checkout); kubectl's
# version skew check and any client that reads /version want the real one.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done

staging=$(mktemp -d "$out/.build.XXXXXX")
trap 'rm -rf "$staging"' EXIT
start=$(date +%s)
# Static, as Kubernetes' own release builds them (hack/lib/golang.sh builds these with CGO_ENABLED=0).
(cd "$here/etcd" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$staging/etcd" go.etcd.io/etcd/server/v3)
(cd "$here/kubernetes" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "$ldflags" -o "$staging/" \
	k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
	k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl)
mv -f "$staging"/* "$out/"
echo "control plane: built in $(( $(date +%s) - start )) s"
ls -l "$out"
up_to_date || { echo "error: the binaries in $out do not report Kubernetes $k8s_version / etcd $etcd_version" >&2; exit 1; }
