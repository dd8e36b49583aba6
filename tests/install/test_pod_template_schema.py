"""The pod templates of both CRDs carry Kubernetes' PodTemplateSpec schema, checked on the real API server.

- The committed CRDs are what scripts/gen_crd_pod_schema.py makes from the OpenAPI of the server the
  tests start (the pinned Kubernetes): a Kubernetes bump fails here until the CRDs are regenerated.
- `kubectl apply` (strict field validation, its default) refuses a misspelled container field, a
  wrong type and a field no PodSpec has, naming the field, in every pod template of both kinds.
- Every manifest we ship or were given (examples/, the old operators' manifests in tests/versions)
  still applies, stored as written: the schema adds no default and prunes nothing.
- The CRDs fit the API server's limits, and the README's client-side `kubectl apply -k` fits the
  last-applied-configuration annotation.
"""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.apiserver import apply_objects, create, get, install, refresh, update, update_status, wait_for
from helpers.scripts import load_script

from localcluster.controlplane.processes import ControlPlane

pytestmark = pytest.mark.apiserver

ROOT = Path(__file__).resolve().parents[2]
gen = load_script("gen_crd_pod_schema")

# The limit kubectl's client-side apply meets: the object's JSON goes into an annotation, and the API
# server refuses an object whose annotations total more (TotalAnnotationSizeLimitB in apimachinery).
ANNOTATION_LIMIT = 256 * 1024
# etcd's default request limit (--max-request-bytes), which a CRD must fit with room for its status.
ETCD_REQUEST_LIMIT = int(1.5 * 1024 * 1024)
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@pytest.fixture(scope="module")
def cp(control_plane: ControlPlane) -> ControlPlane:
    install(control_plane)
    return control_plane


@pytest.fixture(scope="module")
def ns(cp: ControlPlane) -> Iterator[str]:
    name = f"t-pod-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", name)
    yield name
    cp.kubectl("delete", "namespace", name, "--wait=false", check=False)


def test_the_committed_crds_are_what_the_generator_makes_from_the_running_server(cp):
    openapi = cp.get(gen.OPENAPI_PATH)
    version = cp.get("/version")["gitVersion"]
    generated = gen.generate(openapi, version)
    for path, text in generated.items():
        assert path.read_text() == text, (
            f"{path.relative_to(ROOT)} is not what scripts/gen_crd_pod_schema.py makes from Kubernetes {version}: "
            "rerun it")
    mxjob = yamlio.load(generated[ROOT / "crd" / "mxjob-crd.yaml"])
    template = mxjob["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "mxReplicaSpecs"]["additionalProperties"]["properties"]["template"]
    assert template["properties"]["spec"]["properties"]["containers"]["items"]["properties"]["args"]["type"] == "array"
    assert f"Kubernetes {version}'s PodTemplateSpec" in generated[ROOT / "crd" / "mxjob-crd.yaml"]


# ---------------------------------------------------------------------------------------------
# Typos inside pod templates, refused by kubectl apply (strict by default) on the real server


def mxjob(container: dict, **pod_spec: object) -> dict:
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "typo"},
            "spec": {"mxReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "mxnet", "image": "mxjob/mxnet:1.9.1", **container}], **pod_spec}}}}}}


def chainerjob(where: str, container: dict, **pod_spec: object) -> dict:
    good = {"spec": {"containers": [{"name": "chainer", "image": "everpeace/chainermn:1.3.0"}]}}
    bad = {"spec": {"containers": [{"name": "chainer", "image": "everpeace/chainermn:1.3.0", **container}], **pod_spec}}
    spec = {"master": {"template": bad if where == "master" else good},
            "workerSets": {"ws0": {"replicas": 1, "template": bad if where == "worker" else good}}}
    return {"apiVersion": "kubeflow.org/v1alpha1", "kind": "ChainerJob", "metadata": {"name": "typo"}, "spec": spec}


MX = "spec.mxReplicaSpecs.Worker.template.spec"
MASTER = "spec.master.template.spec"
WORKER = "spec.workerSets.ws0.template.spec"
# name: (manifest, what the server's answer must say)
TYPOS = {
    "mxjob-arg-for-args": (mxjob({"arg": ["--epochs", "1"]}), [f'unknown field "{MX}.containers[0].arg"']),
    "mxjob-containerPort-a-string": (
        mxjob({"ports": [{"containerPort": "x"}]}),
        [f"{MX}.containers[0].ports[0].containerPort: Invalid value", "must be of type integer"]),
    "mxjob-unknown-pod-spec-field": (mxjob({}, nodeSelecter={"disk": "ssd"}), [f'unknown field "{MX}.nodeSelecter"']),
    "chainerjob-master-arg-for-args": (chainerjob("master", {"arg": ["-e", "1"]}), [f'unknown field "{MASTER}.containers[0].arg"']),
    "chainerjob-worker-containerPort-a-string": (
        chainerjob("worker", {"ports": [{"containerPort": "x"}]}),
        [f"{WORKER}.containers[0].ports[0].containerPort: Invalid value", "must be of type integer"]),
    "chainerjob-worker-unknown-pod-spec-field": (
        chainerjob("worker", {}, hostNetwrok=True), [f'unknown field "{WORKER}.hostNetwrok"']),
}


def kubectl_apply(cp: ControlPlane, ns: str, doc: dict, *args: str) -> tuple[int, str, str]:
    done = cp.kubectl("apply", "--dry-run=server", "-n", ns, "-f", "-", *args, input=json.dumps(doc), check=False)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("doc,said", TYPOS.values(), ids=TYPOS.keys())
def test_kubectl_apply_refuses_a_typo_in_a_pod_template_naming_the_field(cp, ns, doc, said):
    code, _, err = kubectl_apply(cp, ns, doc)
    assert code != 0, f"accepted: {doc}"
    for fragment in said:
        assert fragment in err, err


@pytest.mark.parametrize("doc,said", TYPOS.values(), ids=TYPOS.keys())
def test_the_same_manifest_without_the_typo_applies(cp, ns, doc, said):
    # The control for each refusal above: what it refused was the typo, not the rest of the job.
    fixed = json.loads(json.dumps(doc).replace('"arg"', '"args"').replace('"containerPort": "x"', '"containerPort": 9000')
                       .replace('"nodeSelecter"', '"nodeSelector"').replace('"hostNetwrok"', '"hostNetwork"'))
    code, out, err = kubectl_apply(cp, ns, fixed)
    assert code == 0 and "Warning" not in err, err
    assert "created (server dry run)" in out


# ---------------------------------------------------------------------------------------------
# Every manifest still applies, stored as written


def manifests() -> dict[str, dict]:
    """Every MXJob and ChainerJob in examples/ and in tests/versions (the old operators' manifests)."""
    found = {}
    for path in sorted([*(ROOT / "examples").rglob("*.yaml"), *(ROOT / "tests" / "versions").glob("*.yaml")]):
        for i, doc in enumerate(yamlio.load_all(path.read_text())):
            if doc and doc.get("kind") in ("MXJob", "ChainerJob"):
                found[f"{path.relative_to(ROOT)}#{i}"] = doc
    return found


MANIFESTS = manifests()


def test_the_manifests_are_found():
    kinds = {(doc["kind"], doc["apiVersion"]) for doc in MANIFESTS.values()}
    assert kinds == {("MXJob", "kubeflow.org/v1"), ("MXJob", "kubeflow.org/v1beta1"), ("MXJob", "kubeflow.org/v1alpha2"),
                     ("ChainerJob", "kubeflow.org/v1alpha1")}
    assert len(MANIFESTS) >= 15


@pytest.mark.parametrize("doc", MANIFESTS.values(), ids=MANIFESTS.keys())
def test_every_manifest_applies_with_kubectl_and_is_stored_as_written(cp, ns, doc):
    doc = copy.deepcopy(doc)
    doc["metadata"].pop("namespace", None)  # the test's namespace instead
    code, out, err = kubectl_apply(cp, ns, doc, "-o", "json")
    assert code == 0, err
    # Only an older version's deprecation may be said.
    assert [line for line in err.splitlines() if "MXJob is deprecated" not in line] == [], err
    stored = json.loads(out)
    defaults = {"jobMode": "MXTrain", "runPolicy": {}} if doc["kind"] == "MXJob" else {}
    assert stored["spec"] == {**defaults, **doc["spec"]}


def test_a_port_is_stored_without_a_protocol_default(cp, ns):
    # Kubernetes' OpenAPI has `protocol` default to TCP; the CRDs carry no default, so the stored job is
    # what was written, and the pod's own defaulting adds TCP to the pod the hook builds.
    doc = mxjob({"ports": [{"name": "ps", "containerPort": 9091}]})
    verdict = create(cp, doc, ns, dry_run=True, field_validation="Strict")
    assert verdict.accepted and verdict.stored is not None, verdict.message
    assert verdict.stored["spec"]["mxReplicaSpecs"]["Worker"]["template"] == doc["spec"]["mxReplicaSpecs"]["Worker"]["template"]


def test_a_null_in_a_template_is_dropped_as_in_a_pod(cp, ns):
    # Generated manifests often carry `creationTimestamp: null`; the server drops a null a schema does
    # not declare nullable (as a Pod's decoding ignores it), and refuses nothing.
    doc = mxjob({"resources": {}})
    template = doc["spec"]["mxReplicaSpecs"]["Worker"]["template"]
    template["metadata"] = {"creationTimestamp": None, "labels": {"a": "b"}}
    verdict = create(cp, doc, ns, dry_run=True, field_validation="Strict")
    assert verdict.accepted and verdict.stored is not None, verdict.message
    expected = copy.deepcopy(template)
    del expected["metadata"]["creationTimestamp"]
    assert verdict.stored["spec"]["mxReplicaSpecs"]["Worker"]["template"] == expected


@pytest.mark.parametrize("cpu", [0.5, "0.5", "500m", 2])
def test_a_quantity_is_a_number_or_a_string_as_in_a_pod(cp, ns, cpu):
    # Kubernetes' Quantity is a string or a number, a float included: an untyped node in the CRDs.
    code, out, err = kubectl_apply(cp, ns, mxjob({"resources": {"limits": {"cpu": cpu}}}), "-o", "json")
    assert code == 0, err
    container = json.loads(out)["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["cpu"] == cpu


# ---------------------------------------------------------------------------------------------
# Size


def test_the_crds_fit_the_api_servers_limits_and_client_side_apply(cp):
    # install() ran the README's `kubectl apply -k` (client-side): the server holds each CRD with the
    # annotation kubectl writes, its whole JSON, under the 256 KiB every object's annotations share.
    for name in ("mxjobs.kubeflow.org", "chainerjobs.kubeflow.org"):
        crd = cp.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        annotation = crd["metadata"]["annotations"][LAST_APPLIED]
        assert len(annotation.encode()) < ANNOTATION_LIMIT, name
        assert len(json.dumps(crd, separators=(",", ":")).encode()) < ETCD_REQUEST_LIMIT / 2, name


# ---------------------------------------------------------------------------------------------
# Upgrade: jobs stored under the free-form CRD keep working under the generated one

UPGRADE_GROUP = "podschema.mxjob.test"


def regrouped(crd: dict, *, free_form: bool) -> dict:
    """The MXJob CRD in a group of its own (so it can change under the other tests), its templates free-form or not."""
    crd = copy.deepcopy(crd)
    names = {k: v for k, v in crd["spec"]["names"].items() if k not in ("shortNames", "categories")}
    crd["spec"].update(group=UPGRADE_GROUP, names=names)
    crd["metadata"] = {"name": f"{names['plural']}.{UPGRADE_GROUP}"}
    for version in crd["spec"]["versions"]:
        node = gen._lookup(version["schema"]["openAPIV3Schema"], gen.TEMPLATES["crd/mxjob-crd.yaml"][0][5:-1])
        if free_form:
            node["template"] = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


def test_a_job_stored_before_the_schema_takes_updates_and_status_writes(cp, ns):
    shipped = yamlio.load((ROOT / "crd" / "mxjob-crd.yaml").read_text())
    free, generated = regrouped(shipped, free_form=True), regrouped(shipped, free_form=False)
    # What the free-form CRD let users store: a typo, a duplicate env name (and a float quantity,
    # which the generated schema takes too).
    old = mxjob({"arg": ["-x"], "resources": {"limits": {"cpu": 0.5}}, "env": [{"name": "A", "value": "1"},
                                                                              {"name": "A", "value": "2"}]})
    old["apiVersion"] = f"{UPGRADE_GROUP}/v1"
    try:
        apply_objects(cp, [free])
        cp.wait_established(free["metadata"]["name"])
        refresh(cp)
        stored = create(cp, old, ns)
        assert stored.accepted, stored.message
        apply_objects(cp, [generated], "--server-side", "--force-conflicts")
        # In force when the typo is refused (a strict write names it).
        wait_for(lambda: not create(cp, {**old, "metadata": {"name": "probe"}}, ns, dry_run=True,
                                    field_validation="Strict").accepted, "the generated schema in force")
        now = get(cp, old["apiVersion"], "MXJob", "typo", ns)
        assert now is not None
        container = now["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
        assert "arg" not in container, "an unknown field is pruned when the job is read"
        assert container["resources"]["limits"]["cpu"] == 0.5 and len(container["env"]) == 2
        labelled = copy.deepcopy(now)
        labelled["metadata"]["labels"] = {"team": "a"}
        verdict = update(cp, labelled, ns, dry_run=True, field_validation="Strict")
        assert verdict.accepted, verdict.message
        verdict = update_status(cp, {**now, "status": {"specError": "x"}}, ns, dry_run=True, field_validation="Strict")
        assert verdict.accepted, verdict.message
        # The control: the rules still run on such a job (its template stays immutable).
        edited = copy.deepcopy(labelled)
        edited["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = 0.25
        verdict = update(cp, edited, ns, dry_run=True, field_validation="Strict")
        assert not verdict.accepted and "spec.mxReplicaSpecs is immutable" in verdict.message, verdict.message
    finally:
        cp.kubectl("delete", "crd", generated["metadata"]["name"], "--wait=false", check=False)
        refresh(cp)


def test_a_template_takes_duplicate_env_names_as_a_pod_does(cp, ns):
    # Kubernetes keys a container's env by name (x-kubernetes-list-type: map), but a Pod takes one name
    # twice (the later wins, with a warning); the CRDs' lists are atomic, so a template takes it too.
    doc = mxjob({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dup"},
           "spec": doc["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]}
    code, _, err = kubectl_apply(cp, ns, pod)
    assert code == 0 and 'hides previous definition of "A"' in err, err
    code, _, err = kubectl_apply(cp, ns, doc)
    assert code == 0, err
