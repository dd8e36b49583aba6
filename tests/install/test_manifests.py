"""Every kustomization renders, every object in it is valid, and the install wires up correctly.

Built-in kinds are checked against the official Kubernetes OpenAPI schemas (kubernetes-validate,
strict, one pinned minor); the CompositeController against a schema of the Metacontroller fields
we use; MXJobs against our own CRD.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers import yamlio
from helpers.manifests import KUBERNETES_VERSION, ROOT, render, the, validation_errors
from kubernetes_validate.utils import all_versions

from localcluster.config import webhook_url

INSTALL_DIR = ROOT / "metacontroller"
NAMESPACE = "mxjob-system"
HOOKS_NAME = "mxjob-hooks"


_KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")


def kustomization_dirs() -> list[Path]:
    """The project's own kustomizations: tracked by git, so nothing a build copied in (Kueue's manifests
    under .controlplane/), a virtualenv or a local run left is taken for one."""
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.splitlines()
    return sorted({(ROOT / name).parent for name in tracked if Path(name).name in _KUSTOMIZATION_FILES})


KUSTOMIZATION_DIRS = kustomization_dirs()






def install() -> tuple[dict, ...]:
    return render(INSTALL_DIR)










# ---------------------------------------------------------------------------------------------
# Every kustomization


def test_pinned_kubernetes_version_is_shipped_by_kubernetes_validate():
    assert f"{KUBERNETES_VERSION}.0" in all_versions()


def test_kustomizations_are_found():
    rel = {d.relative_to(ROOT).as_posix() for d in KUSTOMIZATION_DIRS}
    assert {"crd", "metacontroller"} <= rel


@pytest.mark.parametrize(
    "directory", KUSTOMIZATION_DIRS, ids=[d.relative_to(ROOT).as_posix() for d in KUSTOMIZATION_DIRS]
)
def test_kustomization_renders_valid_objects(directory):
    objects = render(directory)
    assert objects, "renders nothing"
    problems = {
        f"{o.get('kind')}/{o.get('metadata', {}).get('name')}": validation_errors(o)
        for o in objects
    }
    assert {k: v for k, v in problems.items() if v} == {}


def test_validation_rejects_a_broken_deployment():
    deployment = the(install(), "Deployment", HOOKS_NAME)
    broken = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    assert validation_errors(broken) != []
    misspelt = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    assert validation_errors(misspelt) != [], "strict mode should reject unknown fields"


def test_validation_rejects_a_misspelt_composite_controller_field():
    controller = the(install(), "CompositeController", "mxjob-controller")
    misspelt = {**controller, "spec": {**controller["spec"], "generateSelectors": True}}
    assert validation_errors(misspelt) != []


# ---------------------------------------------------------------------------------------------
# The install directory


def test_install_contains_everything_but_metacontroller():
    kinds = {(o["kind"], o["metadata"]["name"]) for o in install()}
    assert kinds >= {
        ("Namespace", NAMESPACE),
        ("CustomResourceDefinition", "mxjobs.kubeflow.org"),
        ("CompositeController", "mxjob-controller"),
        ("CustomResourceDefinition", "chainerjobs.kubeflow.org"),
        ("CompositeController", "chainerjob-controller"),
        ("ServiceAccount", HOOKS_NAME),
        ("Deployment", HOOKS_NAME),
        ("Service", HOOKS_NAME),
    }


def test_cluster_scoped_objects_have_no_namespace_and_the_rest_are_in_mxjob_system():
    cluster_scoped = {"Namespace", "CustomResourceDefinition", "CompositeController", "ClusterRole",
                      "ClusterRoleBinding"}
    for obj in install():
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in cluster_scoped:
            assert namespace is None, obj["kind"]
        else:
            assert namespace == NAMESPACE, obj["kind"]


def test_every_object_carries_the_common_labels():
    for obj in install():
        labels = obj["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/name") == "mxjob-operator", obj["kind"]
        assert labels.get("app.kubernetes.io/part-of") == "mxjob-operator", obj["kind"]


def test_namespace_enforces_the_restricted_pod_security_standard():
    labels = the(install(), "Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


CONTROLLERS = {"mxjob-controller": "mxjobs.kubeflow.org", "chainerjob-controller": "chainerjobs.kubeflow.org"}


@pytest.mark.parametrize("controller,crd_name", CONTROLLERS.items(), ids=list(CONTROLLERS))
def test_composite_controller_manages_the_jobs_of_its_crd(controller, crd_name):
    objects = install()
    spec = the(objects, "CompositeController", controller)["spec"]
    crd = the(objects, "CustomResourceDefinition", crd_name)["spec"]
    storage = next(v["name"] for v in crd["versions"] if v["storage"])
    assert spec["parentResource"] == {
        "apiVersion": f"{crd['group']}/{storage}",
        "resource": crd["names"]["plural"],
    }
    assert spec["generateSelector"] is True


# Metacontroller's --cache-flush-interval default: a resyncPeriodSeconds at or above it never fires.
CACHE_FLUSH_SECONDS = 30 * 60


@pytest.mark.parametrize("controller", CONTROLLERS)
def test_every_controller_resyncs_below_metacontrollers_cache_flush(controller):
    # After a hooks outage the retry backoff grows to 1,000 s; only a periodic sync bounds how long
    # a quiet job then waits.
    period = the(install(), "CompositeController", controller)["spec"].get("resyncPeriodSeconds")
    assert isinstance(period, int) and 0 < period < CACHE_FLUSH_SECONDS


def child_strategies(controller: str) -> dict[tuple[str, str], str]:
    spec = the(install(), "CompositeController", controller)["spec"]
    return {
        (c["apiVersion"], c["resource"]): c.get("updateStrategy", {}).get("method", "OnDelete")
        for c in spec["childResources"]
    }


def test_composite_controller_child_rules():
    assert child_strategies("mxjob-controller") == {("v1", "pods"): "OnDelete", ("v1", "services"): "InPlace",
                                                         ("v1", "configmaps"): "OnDelete",
                                                         # Progress reporting (hooks.shared.progress).
                                                         ("v1", "serviceaccounts"): "OnDelete",
                                                         ("rbac.authorization.k8s.io/v1", "roles"): "OnDelete",
                                                         ("rbac.authorization.k8s.io/v1", "rolebindings"): "OnDelete"}


def test_chainerjob_controller_child_rules():
    # Create-only for the ServiceAccount and the master Job (a Job's template is immutable);
    # in place for what follows replica edits and the scale to 0.
    assert child_strategies("chainerjob-controller") == {
        ("v1", "serviceaccounts"): "OnDelete",
        ("rbac.authorization.k8s.io/v1", "roles"): "InPlace",
        ("rbac.authorization.k8s.io/v1", "rolebindings"): "InPlace",
        ("v1", "configmaps"): "InPlace",
        ("v1", "services"): "InPlace",
        ("apps/v1", "statefulsets"): "InPlace",
        ("batch/v1", "jobs"): "OnDelete",
    }


def test_chainerjob_child_rules_match_the_hooks_child_keys():
    from hooks.chainerjob.sync import CHILD_KEYS

    keys = []
    for api_version, resource in child_strategies("chainerjob-controller"):
        kind = {"serviceaccounts": "ServiceAccount", "roles": "Role", "rolebindings": "RoleBinding",
                "configmaps": "ConfigMap", "services": "Service", "statefulsets": "StatefulSet",
                "jobs": "Job"}[resource]
        keys.append(f"{kind}.{api_version}")
    assert keys == list(CHILD_KEYS)


@pytest.mark.parametrize("controller,path", [("mxjob-controller", "/sync"),
                                             ("chainerjob-controller", "/chainerjob/sync")])
def test_sync_webhook_points_at_the_hooks_service(controller, path):
    objects = install()
    webhook = the(objects, "CompositeController", controller)["spec"]["hooks"]["sync"]["webhook"]
    assert webhook["timeout"] == "10s"
    url = urlsplit(webhook_url(webhook))
    assert url.scheme == "http"
    assert url.path == path
    host, _, port = url.netloc.partition(":")
    service_name, _, namespace = host.partition(".")
    service = the(objects, "Service", service_name)
    assert service["metadata"]["namespace"] == namespace == NAMESPACE
    assert [p["port"] for p in service["spec"]["ports"]] == [int(port or 80)]


@pytest.mark.parametrize("controller", ["mxjob-controller", "chainerjob-controller"])
def test_each_customize_hook_points_at_a_route_the_hooks_serve(controller):
    from hooks.kinds import KINDS

    hooks = the(install(), "CompositeController", controller)["spec"]["hooks"]
    webhook = hooks["customize"]["webhook"]
    assert webhook["timeout"] == "10s"
    url = urlsplit(webhook_url(webhook))
    assert url.netloc == urlsplit(webhook_url(hooks["sync"]["webhook"])).netloc
    [kind] = [k for k in KINDS if url.path in k.customize_routes]
    assert urlsplit(webhook_url(hooks["sync"]["webhook"])).path in kind.routes


def test_service_reaches_the_http_port_of_the_hooks_pods():
    objects = install()
    service = the(objects, "Service", HOOKS_NAME)
    pod = the(objects, "Deployment", HOOKS_NAME)["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (port,) = service["spec"]["ports"]
    container_ports = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert port["targetPort"] in container_ports
    assert container_ports[port["targetPort"]] == 8080


def test_deployment_selects_its_own_pods_and_so_does_the_disruption_budget():
    objects = install()
    deployment = the(objects, "Deployment", HOOKS_NAME)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    budget = the(objects, "PodDisruptionBudget", HOOKS_NAME)
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["spec"]["minAvailable"] < deployment["spec"]["replicas"]


def _hooks_pod() -> dict:
    return the(install(), "Deployment", HOOKS_NAME)["spec"]["template"]["spec"]


def _hooks_container() -> dict:
    (container,) = _hooks_pod()["containers"]
    return container


def test_deployment_runs_two_replicas_of_the_hooks_image():
    deployment = the(install(), "Deployment", HOOKS_NAME)
    assert deployment["spec"]["replicas"] == 2
    image = _hooks_container()["image"]
    name, _, tag = image.rpartition(":")
    assert name.endswith(HOOKS_NAME) and tag, "kustomize `images:` should pin a tag"


def test_hooks_image_tag_is_set_through_kustomize_images():
    kustomization = yamlio.load((INSTALL_DIR / "kustomization.yaml").read_text())
    assert {i["name"] for i in kustomization["images"]} == {HOOKS_NAME}
    source = yamlio.load((INSTALL_DIR / "hooks" / "deployment.yaml").read_text())
    assert source["spec"]["template"]["spec"]["containers"][0]["image"] == HOOKS_NAME


def test_hooks_pod_meets_the_restricted_pod_security_standard():
    pod = _hooks_pod()
    container = _hooks_container()
    pod_security = pod["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] > 0
    assert pod_security["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert "add" not in security["capabilities"]
    assert security["readOnlyRootFilesystem"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")


def test_hooks_pod_does_not_mount_an_api_token():
    objects = install()
    pod = _hooks_pod()
    assert pod["automountServiceAccountToken"] is False
    account = the(objects, "ServiceAccount", pod["serviceAccountName"])
    assert account["automountServiceAccountToken"] is False


def test_writable_tmp_holds_the_metrics_directory():
    pod = _hooks_pod()
    container = _hooks_container()
    env = {e["name"]: e.get("value") for e in container["env"]}
    metrics_dir = env["PROMETHEUS_MULTIPROC_DIR"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts.get("/tmp"), "a read-only root filesystem needs a writable /tmp"
    assert metrics_dir.startswith("/tmp/")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


def test_hooks_have_liveness_and_readiness_probes_on_the_http_port():
    container = _hooks_container()
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}


def test_hooks_have_resource_requests_and_limits():
    resources = _hooks_container()["resources"]
    for kind in ("requests", "limits"):
        assert set(resources[kind]) >= {"cpu", "memory"}, kind



# --- the RBAC Metacontroller needs ------------------------------------------------------------------

CHILD_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


def allows(rules: list[dict], group: str, resource: str, verb: str) -> bool:
    """Whether any rule grants verb on every object of group/resource (as the API server reads it)."""
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"]
               and not r.get("resourceNames") for r in rules)


def metacontroller_rules() -> list[dict]:
    objects = install()
    binding = the(objects, "ClusterRoleBinding", "mxjob-metacontroller")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "metacontroller", "namespace": "metacontroller"}]
    assert binding["roleRef"]["name"] == "mxjob-metacontroller"
    return the(objects, "ClusterRole", "mxjob-metacontroller")["rules"]


@pytest.mark.parametrize("controller", ["mxjob-controller", "chainerjob-controller"])
def test_metacontroller_may_manage_every_parent_and_child_of_each_controller(controller):
    rules = metacontroller_rules()
    spec = the(install(), "CompositeController", controller)["spec"]
    group = spec["parentResource"]["apiVersion"].rpartition("/")[0]
    parent = spec["parentResource"]["resource"]
    missing = [(group, parent, v) for v in ("get", "list", "watch", "update")
               if not allows(rules, group, parent, v)]
    missing += [(group, f"{parent}/status", v) for v in ("get", "update") if not allows(rules, group, f"{parent}/status", v)]
    # Metacontroller's owner references block owner deletion: with OwnerReferencesPermissionEnforcement on,
    # that needs update on the parent's finalizers.
    missing += [(group, f"{parent}/finalizers", "update")] if not allows(rules, group, f"{parent}/finalizers", "update") else []
    for child in spec["childResources"]:
        child_group = child["apiVersion"].rpartition("/")[0]
        missing += [(child_group, child["resource"], v) for v in CHILD_VERBS
                    if not allows(rules, child_group, child["resource"], v)]
    assert missing == []


def related_by_each_customize_hook() -> dict[str, list[dict]]:
    """What each kind's customize hook relates, for a parent that relates the most: an MXJob queued in
    Kueue with plain-pod groups on (its Workloads), a ChainerJob (its pods)."""
    from hooks.chainerjob.related import customize_chainerjob
    from hooks.mxjob.sync import customize_mxjob

    mxjob = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
             "metadata": {"name": "j", "namespace": "n", "uid": "u", "labels": {"kueue.x-k8s.io/queue-name": "q"}}}
    chainerjob = {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": "j", "namespace": "n"}}
    return {"MXJob": customize_mxjob({"parent": mxjob}, kueue_pod_groups="true")["relatedResources"],
            "ChainerJob": customize_chainerjob({"parent": chainerjob})["relatedResources"]}


@pytest.mark.parametrize("kind", ["MXJob", "ChainerJob"])
def test_metacontroller_may_list_and_watch_what_the_customize_hook_relates(kind):
    # Metacontroller reads related objects through informers of its own, so it needs list and watch.
    rules = metacontroller_rules()
    related = related_by_each_customize_hook()[kind]
    assert related
    missing = [(r["apiVersion"], r["resource"], v) for r in related for v in ("list", "watch")
               if not allows(rules, r["apiVersion"].rpartition("/")[0], r["resource"], v)]
    assert missing == []


def test_metacontroller_holds_everything_the_chainerjob_launcher_role_grants():
    """The API server's escalation check: Metacontroller can only create a Role granting what it holds."""
    from helpers.chainersim import chainerjob
    from helpers.mcsim import T0

    from hooks.chainerjob.sync import CHILD_KEYS, sync_chainerjob

    parent = chainerjob(workers={"ws": 2})
    answer = sync_chainerjob({"parent": parent, "children": {k: {} for k in CHILD_KEYS}}, now=T0)
    [role] = [c for c in answer["children"] if c["kind"] == "Role"]
    rules = metacontroller_rules()
    not_held = [(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"] if not allows(rules, g, r, v)]
    assert role["rules"] and not_held == []
