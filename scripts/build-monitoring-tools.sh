#!/usr/bin/env bash
# Build the tools tests/install/test_monitoring.py checks monitoring/ with, into OUT (default .tools/bin):
#   kube-state-metrics  (KSM_VERSION, default v2.20.0): run against the real API server, its /metrics compared
#                       with what the test expects of monitoring/custom-resource-state.yaml;
#   promtool            (PROMETHEUS_VERSION, the Go module version of Prometheus: v0.316.0 is Prometheus 3.16):
#                       `promtool check rules` and `promtool test rules` on monitoring/prometheusrule.yaml.
# Both from the Go module proxy (`go install module@version`). Where the proxy does not serve kube-state-metrics,
# KSM_SOURCE=<a checkout of kubernetes/kube-state-metrics at KSM_VERSION> builds it from that checkout instead.
# Without a tool the test skips what needs it, and says so. The Go caches stay where Go keeps them (under $HOME),
# outside the checkout. Does nothing for a tool that is already built at its version.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.tools/bin}
mkdir -p "$out"
out=$(cd "$out" && pwd)
ksm_version=${KSM_VERSION:-v2.20.0}
prometheus_version=${PROMETHEUS_VERSION:-v0.316.0}

if ! command -v go >/dev/null; then
	echo "error: 'go' is not on PATH: kube-state-metrics and promtool are built from source with Go" >&2
	exit 1
fi

# `kube-state-metrics version` prints "kube-state-metrics, version X.Y.Z" only when built with this.
ksm_ldflags="-s -w -X github.com/prometheus/common/version.Version=${ksm_version#v}"
if [ -x "$out/kube-state-metrics" ] && [[ "$("$out/kube-state-metrics" version 2>&1)" == *"version ${ksm_version#v} "* ]]; then
	echo "kube-state-metrics ${ksm_version} already in $out"
elif GOBIN=$out GOFLAGS=-mod=mod go install -trimpath -ldflags "$ksm_ldflags" "k8s.io/kube-state-metrics/v2@${ksm_version}"; then
	echo "kube-state-metrics ${ksm_version}: built into $out"
elif [ -n "${KSM_SOURCE:-}" ]; then
	echo "kube-state-metrics: the module proxy does not serve it; building from the checkout $KSM_SOURCE"
	(cd "$KSM_SOURCE" && GOFLAGS=-mod=mod go build -trimpath -buildvcs=false -ldflags "$ksm_ldflags" -o "$out/kube-state-metrics" .)
	echo "kube-state-metrics: built into $out from $KSM_SOURCE"
else
	echo "kube-state-metrics ${ksm_version}: NOT BUILT (the module proxy does not serve it here; set KSM_SOURCE to a checkout)" >&2
fi

if [ -x "$out/promtool" ] && "$out/promtool" --version 2>&1 | grep -q "promtool"; then
	echo "promtool already in $out"
elif GOBIN=$out go install -trimpath -ldflags "-s -w" "github.com/prometheus/prometheus/cmd/promtool@${prometheus_version}"; then
	echo "promtool (Prometheus module ${prometheus_version}): built into $out"
else
	echo "promtool: NOT BUILT" >&2
fi
