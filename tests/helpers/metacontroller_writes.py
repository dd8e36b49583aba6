"""A sync's answer written to the real API server the way Metacontroller v4.17.2 writes it.

`write_sync(cp, namespace, request, answer)` plays one sync of a real cluster:
- the request is first moved into `namespace` (`moved`: the parent and every observed child, and
  every `namespace` field that named the parent's), so each case has a namespace of its own;
- what the request says was observed exists first: each observed child created from its
  last-applied annotation, as Metacontroller created it (an observed child has no other past);
- the prerequisites a real cluster has and no job makes: the PriorityClasses the children name
  (a cluster admin's; the Priority admission plugin refuses a pod whose class does not exist);
- then the answer, one object at a time in Metacontroller's order (group, version, kind; by name
  within a kind, which Metacontroller leaves undefined): a child that was not observed is created
  with the `controller-uid` label (generateSelector) and the last-applied annotation; an observed
  child whose rule is InPlace is updated with Metacontroller's three-way merge (ApplyUpdate, ported
  in tests/helpers/go_apply_merge.py) when that changes it, read again and retried on a conflict
  (the StatefulSet controller writes its objects' status meanwhile); OnDelete children are never updated. Deletes
  are left out: nothing is admitted there.

Every write is made as Metacontroller's ServiceAccount (metacontroller/metacontroller, impersonated),
so the rights metacontroller/rbac.yaml and the gang components' rbac.yaml give it are checked too
(creating the launcher's Role needs every right the Role grants), and with `fieldValidation=Strict`,
so a field the server does not know, which it would otherwise drop with a warning, is a refusal.
Owner references are left out: the parent does not exist here, and the garbage collector would delete
children that point at a missing owner while the test still reads them.

`admitted(cp, namespace, request, now)` plays one sync end to end and returns every problem.
`rewrites(cp, namespace, request, answer)` then says what the same answer would write again at the
next sync (an InPlace child the server normalised: Metacontroller PUTs it on every sync, each PUT a
token of its shared 5 requests/s), and `controller_pods(cp, namespace)` waits for the Job and
StatefulSet controllers of the real controller manager to make the pods of what was written and
returns every pod they could not make. `Admission` is the dry-run verdict on children alone, for
tests that judge many answers.
"""
from __future__ import annotations

import copy
import json
import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import kubernetes

from helpers import apiserver, go_apply_merge
from hooks.kinds import SYNC
from localcluster.config import KNOWN_KINDS
from localcluster.controlplane.processes import ControlPlane
from localcluster.metacontroller import write_order

ROOT = Path(__file__).resolve().parents[2]
METACONTROLLER = "system:serviceaccount:metacontroller:metacontroller"
GANG_RBAC = tuple(ROOT / "metacontroller" / "components" / name / "rbac.yaml"
                  for name in ("volcano", "scheduler-plugins", "kubernetes-gang"))
SERVER_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp",
                   "deletionGracePeriodSeconds", "managedFields", "ownerReferences", "selfLink")
PRIORITY_VALUE = 1000
CONFLICT_RETRIES = 10  # a conflict is retried over a fresh read (client-go's RetryOnConflict)


@dataclass
class Write:
    """One write Metacontroller would make, and what the server said."""

    verb: str  # create | update
    obj: dict
    verdict: apiserver.Verdict

    def __str__(self) -> str:
        what = f"{self.verb} {self.obj['kind']} {self.obj['metadata']['name']}"
        return what if self.verdict.accepted else f"{what}: {self.verdict.status} {self.verdict.message}"


def install(cp: ControlPlane) -> None:
    """The install (fixture CRDs, metacontroller/) plus every gang component's RBAC, once per plane."""
    apiserver.install(cp)
    for rbac in GANG_RBAC:
        cp.kubectl("apply", "-f", str(rbac))


def _renamespaced(node: Any, old: tuple[str, str], new: tuple[str, str]) -> Any:
    """`namespace` fields that named the old namespace, and the job's key (`<namespace>/<name>`) in text."""
    if isinstance(node, dict):
        return {k: new[0] if k == "namespace" and v == old[0] else _renamespaced(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_renamespaced(v, old, new) for v in node]
    if isinstance(node, str):
        return node.replace("/".join(old), "/".join(new))
    return node


def moved(request: dict, namespace: str) -> dict:
    """The request as it would be for the same job in `namespace` (its observed children's last-applied
    annotations included, so an observed child is what the hook would have answered there)."""
    meta = request["parent"]["metadata"]
    old, new = (meta["namespace"], meta["name"]), (namespace, meta["name"])
    request = copy.deepcopy(request)
    request["parent"]["metadata"]["namespace"] = namespace
    request["children"] = _renamespaced(request["children"], old, new)
    for objects in request["children"].values():
        for obj in objects.values():
            annotations = obj.get("metadata", {}).get("annotations") or {}
            if go_apply_merge.LAST_APPLIED in annotations:
                last = _renamespaced(json.loads(annotations[go_apply_merge.LAST_APPLIED]), old, new)
                annotations[go_apply_merge.LAST_APPLIED] = go_apply_merge.go_json_marshal(last)
    return request


def update_methods(request: dict) -> dict[tuple[str, str], str]:
    """(apiVersion, kind) -> the child rule's update method, from the request's CompositeController."""
    methods = {}
    for rule in request["controller"]["spec"]["childResources"]:
        kind = KNOWN_KINDS[(rule["apiVersion"], rule["resource"])]
        methods[(rule["apiVersion"], kind)] = (rule.get("updateStrategy") or {}).get("method", "OnDelete")
    return methods


def _order(obj: dict) -> tuple[tuple[str, str, str], str]:
    return write_order(obj["apiVersion"], obj["kind"]), obj["metadata"]["name"]


def observed_children(request: dict) -> list[dict]:
    """The observed children in the order to make them: Metacontroller's, but ServiceAccounts first,
    as the hook has them (progress reporting: pods that name one wait until it is observed)."""
    return sorted((obj for objects in request["children"].values() for obj in objects.values()),
                  key=lambda obj: (obj["kind"] != "ServiceAccount", _order(obj)))


def as_created(observed: dict) -> dict:
    """What Metacontroller sent when it created an observed child: its last-applied annotation's object
    with that annotation (or, when it has none, the object without what the server adds)."""
    annotations = observed["metadata"].get("annotations") or {}
    raw = annotations.get(go_apply_merge.LAST_APPLIED)
    if raw:
        created = json.loads(raw)
        go_apply_merge.set_last_applied(created, json.loads(raw))
        return dict(created)
    created = copy.deepcopy(observed)
    created.pop("status", None)
    for name in SERVER_METADATA:
        created["metadata"].pop(name, None)
    return dict(created)


def _priority_classes(node: Any) -> set[str]:
    found = set()
    if isinstance(node, dict):
        if isinstance(node.get("priorityClassName"), str):
            found.add(node["priorityClassName"])
        for value in node.values():
            found |= _priority_classes(value)
    elif isinstance(node, list):
        for value in node:
            found |= _priority_classes(value)
    return found


def ensure_priority_classes(cp: ControlPlane, objects: list[dict]) -> None:
    """The PriorityClasses the objects name (pods, pod templates, PodGroups), made as a cluster admin would."""
    for name in sorted(set().union(*(_priority_classes(o) for o in objects)) - {"system-cluster-critical", "system-node-critical"}):
        verdict = apiserver.create(cp, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                        "metadata": {"name": name}, "value": PRIORITY_VALUE})
        # 409: made before; 422: no class can have that name, so the pod naming it is refused.
        assert verdict.accepted or verdict.status in (409, 422), verdict.message


def write_sync(cp: ControlPlane, namespace: str, request: dict, answer: dict) -> list[Write]:
    """Write `answer` (the hook's answer to `request`, already moved into `namespace`) as Metacontroller
    would, after creating what the request observed; returns every write of the answer."""
    observed = observed_children(request)
    ensure_priority_classes(cp, observed + answer["children"])
    for obj in observed:
        verdict = apiserver.create(cp, as_created(obj), namespace, user=METACONTROLLER)
        assert verdict.accepted, f"observed {obj['kind']} {obj['metadata']['name']} could not be made: {verdict.message}"
    seen = {(o["apiVersion"], o["kind"], o["metadata"]["name"]): o for o in observed}
    methods = update_methods(request)
    writes = []
    for desired in _desired(request, answer, namespace):
        key = (desired["apiVersion"], desired["kind"], desired["metadata"]["name"])
        if key not in seen:
            go_apply_merge.set_last_applied(desired, copy.deepcopy(desired))
            verdict = apiserver.create(cp, desired, namespace, field_validation="Strict", user=METACONTROLLER)
            writes.append(Write("create", desired, verdict))
            continue
        if methods[key[:2]] != "InPlace" or seen[key]["metadata"].get("deletionTimestamp"):
            continue
        written = update_in_place(cp, namespace, key, desired)
        if written is not None:
            writes.append(written)
    return writes


def update_in_place(cp: ControlPlane, namespace: str, key: tuple[str, str, str], desired: dict) -> Write | None:
    """ApplyUpdate as Metacontroller's client makes it: read, merge, PUT; on a conflict (the Job or
    StatefulSet controller wrote the object's status meanwhile) read again and retry, as its
    clientset's AtomicUpdate does. None when the merge changes nothing."""
    for _ in range(CONFLICT_RETRIES):
        live = apiserver.get(cp, key[0], key[1], key[2], namespace)
        assert live is not None, f"{key[1]} {key[2]} is gone"
        merged = go_apply_merge.ApplyUpdate(live, desired)
        if merged == live:
            return None
        verdict = apiserver.update(cp, merged, namespace, field_validation="Strict", user=METACONTROLLER)
        if verdict.status != 409:
            return Write("update", merged, verdict)
        time.sleep(0.01)
    return Write("update", merged, verdict)


def _desired(request: dict, answer: dict, namespace: str) -> list[dict]:
    """The answer's children as Metacontroller writes them: in its order, namespaced, with the
    controller-uid label it adds under generateSelector."""
    uid = request["parent"]["metadata"]["uid"]
    children = []
    for desired in sorted((copy.deepcopy(c) for c in answer["children"]), key=_order):
        meta = desired.setdefault("metadata", {})
        meta.setdefault("namespace", namespace)
        labels = meta.get("labels") or {}
        labels.setdefault("controller-uid", uid)
        meta["labels"] = labels
        children.append(desired)
    return children


def differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Where two JSON values differ: `path: before -> after`."""
    if isinstance(before, dict) and isinstance(after, dict):
        return [d for key in sorted(set(before) | set(after), key=str)
                for d in differences(before.get(key, "<absent>"), after.get(key, "<absent>"), f"{path}.{key}")]
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True)) for d in differences(b, a, f"{path}[{i}]")]
    return [] if before == after else [f"{path or '.'}: {json.dumps(before)} -> {json.dumps(after)}"]


def rewrites(cp: ControlPlane, namespace: str, request: dict, answer: dict) -> list[str]:
    """What the same answer at the next sync would write again: every InPlace child whose merge with
    what the server stored still differs (Metacontroller then PUTs it on every sync), with where."""
    methods = update_methods(request)
    found = []
    for desired in _desired(request, answer, namespace):
        if methods[(desired["apiVersion"], desired["kind"])] != "InPlace":
            continue
        live = apiserver.get(cp, desired["apiVersion"], desired["kind"], desired["metadata"]["name"], namespace)
        assert live is not None, f"{desired['kind']} {desired['metadata']['name']} was not written"
        merged = go_apply_merge.ApplyUpdate(live, desired)
        found += [f"{desired['kind']} {desired['metadata']['name']} {d}" for d in differences(live, merged)]
    return found


class Admission:
    """The real server's verdict on a hook's children: each created in Metacontroller's order, as its
    ServiceAccount, with the server's default field validation (unknown fields dropped, as
    Metacontroller's writes get), in one namespace that a test's many answers share. A dry run,
    except for the kinds others refer to and that do nothing by themselves (REFERENCED): those are
    made for real and removed afterwards, as a RoleBinding is only admitted for Metacontroller when
    the Role it grants exists (the server's escalation check reads it)."""

    REFERENCED = (("rbac.authorization.k8s.io/v1", "Role"), ("v1", "ServiceAccount"))

    def __init__(self, cp: ControlPlane, namespace: str):
        self.cp, self.namespace = cp, namespace

    def refusals(self, children: list[dict]) -> list[str]:
        """Why the server refuses each child it refuses; [] when it admits them all."""
        ensure_priority_classes(self.cp, children)
        found, made = [], []
        try:
            # ServiceAccounts first: a pod that names one is answered only once it is observed
            # (progress reporting), so it always exists before such a pod is written.
            for child in sorted(children, key=lambda c: (c["kind"] != "ServiceAccount", _order(c))):
                real = (child["apiVersion"], child["kind"]) in self.REFERENCED
                verdict = apiserver.create(self.cp, child, self.namespace, dry_run=not real, user=METACONTROLLER)
                if not verdict.accepted:
                    found.append(f"{child['kind']} {child['metadata']['name']}: {verdict.status} {verdict.message}")
                elif real:
                    made.append(child)
        finally:
            client = apiserver.dynamic(self.cp)
            for child in made:
                client.resources.get(api_version=child["apiVersion"], kind=child["kind"]).delete(
                    name=child["metadata"]["name"], namespace=self.namespace)
        return found


# --- the pods the Job and StatefulSet controllers make ------------------------------------------


def _expected_pods(obj: dict) -> int:
    spec = obj.get("spec") or {}
    if obj["kind"] == "StatefulSet":
        return int(spec.get("replicas", 1))
    if spec.get("suspend"):
        return 0
    return min(int(spec.get("parallelism", 1)), int(spec.get("completions", 1)))


def controller_pods(cp: ControlPlane, namespace: str, timeout: float = 30.0) -> list[str]:
    """Wait until every Job and StatefulSet in the namespace has its pods; returns what the controllers
    could not create (their FailedCreate events), or what is still missing at the timeout."""
    client = apiserver.dynamic(cp)
    owners = [(o, _expected_pods(o)) for api_version, kind in (("batch/v1", "Job"), ("apps/v1", "StatefulSet"))
              for o in client.resources.get(api_version=api_version, kind=kind).get(namespace=namespace).to_dict()["items"]]
    pods = client.resources.get(api_version="v1", kind="Pod")
    events = client.resources.get(api_version="v1", kind="Event")
    deadline = time.monotonic() + timeout
    while True:
        failed = [f"{e['involvedObject']['kind']} {e['involvedObject']['name']}: {e['message']}"
                  for e in events.get(namespace=namespace).to_dict()["items"] if e.get("reason") == "FailedCreate"]
        if failed:
            return sorted(set(failed))
        made: dict[str, int] = {}
        for pod in pods.get(namespace=namespace).to_dict()["items"]:
            for ref in pod["metadata"].get("ownerReferences") or []:
                made[ref["uid"]] = made.get(ref["uid"], 0) + 1
        missing = [f"{o['kind']} {o['metadata']['name']}: {made.get(o['metadata']['uid'], 0)} of {n} pods"
                   for o, n in owners if made.get(o["metadata"]["uid"], 0) < n]
        if not missing:
            return []
        if time.monotonic() > deadline:
            return missing
        time.sleep(0.2)


def new_namespace(cp: ControlPlane, prefix: str = "t") -> str:
    """A namespace with its `default` ServiceAccount, through the client (no kubectl process)."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    client = apiserver.dynamic(cp)
    client.resources.get(api_version="v1", kind="Namespace").create(body={"metadata": {"name": name}})
    accounts = client.resources.get(api_version="v1", kind="ServiceAccount")
    deadline = time.monotonic() + 30
    while True:
        try:
            accounts.get(name="default", namespace=name)
            return name
        except kubernetes.dynamic.exceptions.NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def delete_namespace(cp: ControlPlane, name: str) -> None:
    apiserver.dynamic(cp).resources.get(api_version="v1", kind="Namespace").delete(name=name)


def admitted(cp: ControlPlane, namespace: str, request: dict, now: datetime) -> list[str]:
    """Sync `request` moved into `namespace` and write the answer; every refusal, every pod the Job
    and StatefulSet controllers could not make, and every field the same answer would write again
    at the next sync (the server normalised it: an update on every sync)."""
    request = moved(request, namespace)
    answer = SYNC[request["parent"]["kind"]](request, now=now)
    writes = write_sync(cp, namespace, request, answer)
    refused = [str(w) for w in writes if not w.verdict.accepted]
    return refused or controller_pods(cp, namespace) or [f"written again: {d}" for d in rewrites(cp, namespace, request, answer)]
