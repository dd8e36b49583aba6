"""Local-cluster fixtures for gang scheduling: a controller installed from the guide, the API server refusing a pod, a scheduled pod."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

from helpers.gang_manifests import readme_kustomizations, write_kustomization
from helpers.manifests import render, the
from localcluster.cluster import LocalCluster
from localcluster.config import ControllerConfig, parse_composite_controller
from localcluster.store import StoreError


def gang_controller(tmp_path: Path, component: str, controller: str = "mxjob-controller") -> ControllerConfig:
    """A CompositeController as the kustomization in docs/gang-scheduling.md with a gang component renders it."""
    install = write_kustomization(tmp_path / "install", readme_kustomizations()[component])
    rendered = the(render(install), "CompositeController", controller)
    return parse_composite_controller(rendered, f"docs/gang-scheduling.md kustomization with {component}")


class PodRefusal:
    """The API server refusing to create one pod, by a ValidatingAdmissionPolicy, until `lift()`.

    A gang scheduler's quota holds pods back at the server, whoever creates them (Metacontroller, or
    kube-controller-manager's Job and StatefulSet controllers for a ChainerJob), so the refusal is
    the server's own: an admission policy, which every creator meets."""

    def __init__(self, cluster: LocalCluster, pod_name: str, namespace: str = "default"):
        self.api, self.pod_name, self.namespace = cluster.store, pod_name, namespace
        self.name = f"test-refuse-{pod_name}"

    def _admitted(self) -> bool:
        """Whether the server would create the pod now (a dry run passes admission, stores nothing)."""
        probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.pod_name, "namespace": self.namespace},
                 "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
        try:
            self.api.request("POST", f"/api/v1/namespaces/{self.namespace}/pods?dryRun=All", probe)
        except StoreError as err:
            if err.code in (403, 422) and "exceeded quota" in err.message:
                return False
            if err.code != 409:  # 409: a pod of that name exists, which admission let through
                raise
        return True

    def _wait(self, admitted: bool) -> None:
        deadline = time.monotonic() + 30
        while self._admitted() != admitted:  # a policy takes effect once the server's informer has it
            if time.monotonic() > deadline:
                raise TimeoutError(f"the refusal of pod {self.pod_name} did not {'lift' if admitted else 'start'} in 30 s")
            time.sleep(0.1)

    def __enter__(self) -> PodRefusal:
        group = "admissionregistration.k8s.io/v1"
        self.api.request("POST", f"/apis/{group}/validatingadmissionpolicies", {
                         "apiVersion": group, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": self.name},
                         "spec": {"failurePolicy": "Fail",
                                  "matchConstraints": {"resourceRules": [{
                                      "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                                      "resources": ["pods"]}]},
                                  "validations": [{
                                      "expression": f"object.metadata.name != {self.pod_name!r}",
                                      "message": f"pods {self.pod_name!r} is forbidden: exceeded quota"}]}})
        self.api.request("POST", f"/apis/{group}/validatingadmissionpolicybindings", {
                         "apiVersion": group, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": self.name},
                         "spec": {"policyName": self.name, "validationActions": ["Deny"],
                                  "matchResources": {"namespaceSelector": {"matchLabels": {
                                      "kubernetes.io/metadata.name": self.namespace}}}}})
        self._wait(admitted=False)
        return self

    def lift(self, wait: bool = True) -> None:
        """Let the pod be created: the binding and policy go, and the creator's next retry passes."""
        for kind in ("ValidatingAdmissionPolicyBinding", "ValidatingAdmissionPolicy"):
            path = f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{self.name}"
            with contextlib.suppress(StoreError):
                self.api.request("DELETE", path)
        if wait:
            self._wait(admitted=True)

    def __exit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        # Never left behind on the session's control plane, whatever the test did; after a failing
        # test it is removed without the wait, whose timeout would hide the test's own error.
        self.lift(wait=exc_type is None)


def scheduled(pod: dict) -> dict:
    return next((c for c in pod.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), {})
