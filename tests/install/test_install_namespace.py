"""The install follows the namespace a user's kustomization sets (README, "Install in a cluster").

The README's kustomization, with its optional `namespace:` line turned on for a namespace of this test's
choosing (and each gang kustomization of docs/gang-scheduling.md given the same line), renders CompositeControllers
whose every hook (sync, customize) calls the hooks Service where that namespace put it, read the way
Metacontroller v4.17 builds the URL (localcluster.config.webhook_url). Then, on the real API server, that
install is applied as the README says and jobs of both kinds run through those URLs: the Metacontroller
stand-in resolves each URL's host as cluster DNS would (`LocalCluster(service_dns=True)`: a Service of the API
server; the local hooks server stands in for its endpoints). The control: the URL the install named before
(`mxjob-system`) names no Service there, and a job under it gets the SyncError Metacontroller would report.
"""
from __future__ import annotations

import json
import os
import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from helpers import yamlio
from helpers.gang_manifests import readme_kustomizations
from helpers.manifests import render, the, validation_errors

from localcluster.cluster import LocalCluster, finished
from localcluster.config import ControllerConfig, parse_composite_controller, webhook_url
from localcluster.node.dns import strict_dns_unavailable

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CHECKOUT = "../mxjob-operator/"  # how the README's and the guide's kustomizations refer to this repository
HOOKS = "mxjob-hooks"
SHIPPED_NAMESPACE = "mxjob-system"
# Chosen here, not by the install: any namespace must do.
NAMESPACE = f"ml-platform-{uuid.uuid4().hex[:6]}"
NAMESPACE_LINE = re.compile(r"^# namespace: \S+ .*$", re.M)


def readme_install() -> str:
    [block] = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if b.startswith("# my-install/kustomization.yaml")]
    return block


def with_namespace(text: str, namespace: str) -> str:
    """A kustomization with `namespace:` set: the README's commented line turned on, or the line added."""
    if NAMESPACE_LINE.search(text):
        return NAMESPACE_LINE.sub(f"namespace: {namespace}", text)
    return text + f"namespace: {namespace}\n"


def write(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True)
    checkout = os.path.relpath(ROOT, directory) + "/"
    (directory / "kustomization.yaml").write_text(text.replace(CHECKOUT, checkout).replace("<registry>", "registry.example.com"))
    return directory


# The README's install, and each gang kustomization of the guide, all with the chosen namespace.
INSTALLS = {"readme": readme_install(), **{f"gang-{name}": text for name, text in readme_kustomizations().items()}}


def hook_urls(controller: dict) -> dict[str, str]:
    """Each hook of a CompositeController (sync, customize, ...) and the URL Metacontroller calls for it."""
    return {hook: webhook_url(spec["webhook"]) for hook, spec in controller["spec"]["hooks"].items()}


def test_the_readme_install_offers_the_namespace_line():
    assert NAMESPACE_LINE.search(readme_install())
    assert yamlio.load(readme_install()).get("namespace") is None  # commented out: mxjob-system by default


@pytest.mark.parametrize("install", sorted(INSTALLS))
def test_every_hook_url_names_the_hooks_service_in_the_chosen_namespace(tmp_path, install):
    objects = render(write(tmp_path / "install", with_namespace(INSTALLS[install], NAMESPACE)))
    service = the(objects, "Service", HOOKS)
    assert service["metadata"]["namespace"] == NAMESPACE
    assert the(objects, "Deployment", HOOKS)["metadata"]["namespace"] == NAMESPACE
    assert the(objects, "Namespace")["metadata"]["name"] == NAMESPACE
    controllers = [o for o in objects if o["kind"] == "CompositeController"]
    assert sorted(c["metadata"]["name"] for c in controllers) == ["chainerjob-controller", "mxjob-controller"]
    urls = {(c["metadata"]["name"], hook): url for c in controllers for hook, url in hook_urls(c).items()}
    assert sorted(urls) == [("chainerjob-controller", "customize"), ("chainerjob-controller", "sync"),
                            ("mxjob-controller", "customize"), ("mxjob-controller", "sync")]
    ports = [p["port"] for p in service["spec"]["ports"]]
    for where, url in urls.items():
        parsed = urlsplit(url)
        assert parsed.hostname == f"{HOOKS}.{NAMESPACE}", where
        assert parsed.port in ports, where
    for controller in controllers:
        # Kustomize takes kinds it has no schema for as namespaced, so `namespace:` also lands in the
        # cluster-scoped CompositeController's metadata; the API server drops it (the test below).
        assert controller["metadata"]["namespace"] == NAMESPACE
        metadata = {k: v for k, v in controller["metadata"].items() if k != "namespace"}
        assert not validation_errors({**controller, "metadata": metadata}), controller["metadata"]["name"]
    # Nothing is left pointing at the namespace the install ships with.
    assert SHIPPED_NAMESPACE not in yaml.safe_dump_all(objects)
    # Metacontroller's own ServiceAccount is not moved: it lives in Metacontroller's namespace.
    subjects = [s for o in objects if o["kind"] == "ClusterRoleBinding" for s in o["subjects"]]
    assert subjects and {s["namespace"] for s in subjects} == {"metacontroller"}


def test_without_the_namespace_line_the_urls_name_mxjob_system(tmp_path):
    objects = render(write(tmp_path / "install", readme_install()))
    urls = [url for o in objects if o["kind"] == "CompositeController" for url in hook_urls(o).values()]
    assert len(urls) == 4  # each kind's sync and customize hooks
    assert {urlsplit(url).hostname for url in urls} == {f"{HOOKS}.{SHIPPED_NAMESPACE}"}
    assert the(objects, "Service", HOOKS)["metadata"]["namespace"] == SHIPPED_NAMESPACE


# ---------------------------------------------------------------------------------------------
# On the real API server


def shell_mxjob(name: str) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": name},
            "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "restartPolicy": "Never", "template": {"spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [{"name": "mxnet", "image": "busybox:1.36", "command": ["sh", "-c", "sleep 1; exit 0"]}]}}}}}}


def shell_chainerjob(name: str) -> dict:
    def template(command: list[str]) -> dict:
        return {"spec": {"terminationGracePeriodSeconds": 1,
                         "containers": [{"name": "chainer", "image": "busybox:1.36", "command": command}]}}

    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": name},
            "spec": {"backend": "mpi", "master": {"template": template(["sh", "-c", "sleep 2; exit 0"])},
                     "workerSets": {"ws": {"replicas": 1, "template": template(
                         ["sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1 & wait; done"])}}}}


def sync_errors(cluster: LocalCluster, name: str) -> list[str]:
    """The SyncError messages about one job: the emulation's events, or the Events a real Metacontroller
    records on the parent (reason SyncError, `Sync error: <error>`)."""
    if cluster.engine == "emulation":
        return [e.message for e in cluster.controllers["MXJob"].events if e.parent == name and e.reason == "SyncError"] + [
            e.message for e in cluster.controllers["ChainerJob"].events if e.parent == name and e.reason == "SyncError"]
    assert cluster.control_plane is not None
    listed = cluster.control_plane.kubectl("get", "events", "-n", "default", "-o", "json",
                                           f"--field-selector=involvedObject.name={name},reason=SyncError").stdout
    return [e["message"].removeprefix("Sync error: ") for e in yamlio.load(listed)["items"]]


def use_controller(cluster: LocalCluster, config: ControllerConfig) -> None:
    """Install a CompositeController in place of the one of its parent kind: the emulation restarts its
    stand-in; a real Metacontroller sees the changed object and restarts that controller."""
    if cluster.engine == "emulation":
        cluster.use_controller(config)
        return
    assert cluster.control_plane is not None
    cluster.control_plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(config.raw))


@pytest.mark.apiserver
@pytest.mark.e2e
def test_jobs_run_through_the_urls_of_an_install_in_the_chosen_namespace(tmp_path, metacontroller):
    directory = write(tmp_path / "my-install", with_namespace(readme_install(), NAMESPACE))
    rendered = {o["metadata"]["name"]: o for o in render(directory) if o["kind"] == "CompositeController"}
    configs = [parse_composite_controller(c, f"README install, namespace {NAMESPACE}") for c in rendered.values()]
    assert {c.name: urlsplit(c.hook_url).hostname for c in configs} == {name: f"{HOOKS}.{NAMESPACE}" for name in rendered}
    if metacontroller != "emulation" and strict_dns_unavailable():
        pytest.skip(f"a real Metacontroller reaches the hooks by Service name only where {strict_dns_unavailable()}")
    with LocalCluster(tmp_path / "state", configs=configs, service_dns=True, metacontroller=metacontroller,
                      fault_proxy=True) as cluster:
        cp = cluster.control_plane
        assert cp is not None and cluster.proxy is not None
        applied = cp.kubectl("apply", "-k", str(directory), check=False)
        assert applied.returncode == 0, applied.stderr
        # The local cluster applied the CRDs (and, for a real Metacontroller, the CompositeControllers and their
        # RBAC) server-side before; kubectl says so for those, and nothing else.
        before = ("customresourcedefinition",) if metacontroller == "emulation" else (
            "customresourcedefinition", "compositecontroller", "clusterroles/mxjob-metacontroller",
            "clusterrolebindings/mxjob-metacontroller")
        assert [line for line in applied.stderr.splitlines() if not any(kind in line for kind in before)] == []
        assert cp.kubectl("get", "service", HOOKS, "-n", NAMESPACE, "-o", "name").stdout.strip() == f"service/{HOOKS}"
        # What the server stored (cluster-scoped: the namespace the kustomization wrote into metadata is dropped).
        for name, controller in rendered.items():
            stored = yamlio.load(cp.kubectl("get", "compositecontroller", name, "-o", "yaml").stdout)
            assert "namespace" not in stored["metadata"], name
            assert hook_urls(stored) == hook_urls(controller), name

        for job in (shell_mxjob("through-the-service"), shell_chainerjob("chainer-through-the-service")):
            cluster.submit(job)
            done = cluster.wait_finished(job["metadata"]["name"], 60)
            assert finished(done) == "Succeeded", done.get("status")
            assert cluster.proxy.syncs(done["metadata"]["uid"]) > 0
            assert sync_errors(cluster, job["metadata"]["name"]) == []

        # The control: the same controller calling the namespace the install ships with reaches no Service here.
        shipped = parse_composite_controller(the(render(ROOT / "metacontroller"), "CompositeController", "mxjob-controller"),
                                             "metacontroller/ as shipped")
        assert {urlsplit(url).hostname for url in (shipped.hook_url, shipped.customize_url)} == {f"{HOOKS}.{SHIPPED_NAMESPACE}"}
        use_controller(cluster, shipped)
        job = cluster.submit(shell_mxjob("lost"))
        [error, *_] = cluster.wait_for(lambda: sync_errors(cluster, "lost"), 30, what="a SyncError for the job")
        # Metacontroller asks the customize hook for the related objects before it syncs, so that call fails first.
        lookup = f'Post "{shipped.customize_url}": dial tcp: lookup {HOOKS}.{SHIPPED_NAMESPACE}'
        # What Metacontroller's HTTP client says (a real one wraps it in where it failed, and names the DNS
        # server it asked where the machine has one).
        assert lookup in error and error.endswith("no such host"), error
        assert cluster.pods("lost") == [] and not (cluster.get_job("lost") or {}).get("status")
        # Back to the install's own URL: the same job runs.
        use_controller(cluster, next(c for c in configs if c.parent_kind == "MXJob"))
        done = cluster.wait_finished("lost", 60)
        assert finished(done) == "Succeeded", done.get("status")
        assert done["metadata"]["uid"] == job["metadata"]["uid"]
