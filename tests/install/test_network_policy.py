"""The optional NetworkPolicy for the hooks (metacontroller/components/network-policy, docs/operations.md "Who can
reach the hooks"), through the kustomization the guide shows.

It selects exactly the hooks pods, on the port their Service sends to; it admits Metacontroller's namespace and the
monitoring one, and no other (read with NetworkPolicy's rules: a namespaceSelector matched against a namespace's
labels, the `kubernetes.io/metadata.name` one the API server sets); the guide's patch moves each; `namespace:` moves
the policy with the hooks; the real API server admits it, strictly validated. Nothing here enforces NetworkPolicies
(no network plugin): that the policy drops packets is not tested, and the guide says so.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.manifests import render, the, validation_errors

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "operations.md"
CHECKOUT = "../mxjob-operator/"
COMPONENT = ROOT / "metacontroller" / "components" / "network-policy"


def guide_kustomization() -> str:
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.S)
               if b.startswith("# my-install/kustomization.yaml, with the hooks NetworkPolicy")]
    return block


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True)
    (directory / "kustomization.yaml").write_text(text.replace(CHECKOUT, os.path.relpath(ROOT, directory) + "/"))
    return directory


def with_values(text: str, metacontroller: str, monitoring: str) -> str:
    """The guide's kustomization with its patch's two values set."""
    values = iter((metacontroller, monitoring))
    return re.sub(r"(value: )\S+", lambda m: m.group(1) + next(values), text)


def admits(policy: dict, pod_namespace: str, port: int, hooks_pod: dict) -> bool:
    """Whether the policy lets a pod of `pod_namespace` reach `hooks_pod` on `port` (NetworkPolicy ingress rules: any
    rule whose peers and ports both match; a namespaceSelector's matchLabels against the namespace's labels)."""
    labels = {"kubernetes.io/metadata.name": pod_namespace}
    named = {p["name"]: p["containerPort"] for c in hooks_pod["spec"]["containers"] for p in c.get("ports", [])}
    for rule in policy["spec"]["ingress"]:
        peers = [peer["namespaceSelector"]["matchLabels"].items() <= labels.items() for peer in rule["from"]]
        ports = [named.get(p["port"], p["port"]) == port for p in rule["ports"]]
        if any(peers) and any(ports):
            return True
    return False


def installed(tmp_path: Path, text: str) -> tuple[dict, dict, dict]:
    objects = render(write(tmp_path / f"install-{uuid.uuid4().hex[:6]}", text))
    return the(objects, "NetworkPolicy", "mxjob-hooks"), the(objects, "Deployment", "mxjob-hooks"), the(objects, "Service", "mxjob-hooks")


def test_the_policy_selects_the_hooks_pods_on_the_port_their_service_targets(tmp_path):
    policy, deployment, service = installed(tmp_path, guide_kustomization())
    assert validation_errors(policy) == []
    template = deployment["spec"]["template"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"] == "mxjob-system"
    [target] = [p["targetPort"] for p in service["spec"]["ports"]]
    assert {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]} == {target}


def test_it_admits_metacontroller_and_monitoring_and_no_one_else(tmp_path):
    policy, deployment, _ = installed(tmp_path, guide_kustomization())
    pod = deployment["spec"]["template"]
    assert admits(policy, "metacontroller", 8080, pod)
    assert admits(policy, "monitoring", 8080, pod)
    for namespace in ("default", "team-a", "mxjob-system", "kube-system"):
        assert not admits(policy, namespace, 8080, pod), namespace
    assert not admits(policy, "metacontroller", 9090, pod)


def test_the_guides_patch_moves_both_namespaces(tmp_path):
    policy, deployment, _ = installed(tmp_path, with_values(guide_kustomization(), "mc-system", "observability"))
    pod = deployment["spec"]["template"]
    assert admits(policy, "mc-system", 8080, pod) and admits(policy, "observability", 8080, pod)
    assert not admits(policy, "metacontroller", 8080, pod) and not admits(policy, "monitoring", 8080, pod)


def test_the_policy_follows_the_install_namespace(tmp_path):
    text = guide_kustomization().replace("kind: Kustomization\n", "kind: Kustomization\nnamespace: ml-platform\n")
    policy, deployment, _ = installed(tmp_path, text)
    assert policy["metadata"]["namespace"] == deployment["metadata"]["namespace"] == "ml-platform"


def test_the_component_adds_only_the_policy(tmp_path):
    with_policy = {(o["kind"], o["metadata"]["name"]) for o in render(write(tmp_path / "with", guide_kustomization()))}
    plain = {(o["kind"], o["metadata"]["name"]) for o in render(ROOT / "metacontroller")}
    assert with_policy - plain == {("NetworkPolicy", "mxjob-hooks")}
    assert plain <= with_policy


@pytest.mark.apiserver
def test_the_api_server_admits_the_policy(control_plane, tmp_path):
    policy, _, _ = installed(tmp_path, guide_kustomization().replace("kind: Kustomization\n", "kind: Kustomization\nnamespace: np-test\n"))
    if control_plane.kubectl("get", "namespace", "np-test", check=False).returncode != 0:
        control_plane.kubectl("create", "namespace", "np-test")
    created = control_plane.kubectl("apply", "--validate=strict", "-f", "-", input=json.dumps(policy), check=False)
    assert created.returncode == 0, created.stderr
    assert created.stderr == ""
    stored = yamlio.load(control_plane.kubectl("get", "networkpolicy", "mxjob-hooks", "-n", "np-test", "-o", "yaml").stdout)
    assert stored["spec"] == policy["spec"]
    # The server checks: a port it cannot accept is refused, so the admission above means something.
    broken = json.loads(json.dumps(policy))
    broken["metadata"]["name"] = "broken"
    broken["spec"]["ingress"][0]["ports"][0]["port"] = "not a port name!"
    refused = control_plane.kubectl("apply", "-f", "-", input=json.dumps(broken), check=False)
    assert refused.returncode != 0 and "Invalid" in refused.stderr
