"""The rules of the Go tools that read MXJobs, ported to small Python functions (test oracles).

Each function names the source file and version it follows. They read an MXJob (a dict, as the API
server returns it) exactly as the tool does, so tests/install/test_ecosystem.py can check what our hook
writes against each tool's contract. The Python clients (the Kubeflow training SDK, gjson for
Katib) are used as libraries there, not ported.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import gjson

# --- kubectl ------------------------------------------------------------------------------------


def kubectl_wait_condition(obj: Mapping[str, Any], condition: str, wanted: str = "True") -> bool:
    """`kubectl wait --for=condition=<condition>[=<wanted>]`.

    kubernetes/kubectl pkg/cmd/wait/wait.go (ConditionalWait.checkCondition, getObservedGeneration):
    the first condition whose type matches case-insensitively decides; if metadata.generation is
    set and the observed generation (the condition's own, else status.observedGeneration) is
    older, the condition is not met.
    """
    generation = (obj.get("metadata") or {}).get("generation")
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if str(cond.get("type", "")).lower() != condition.lower():
            continue
        observed = cond.get("observedGeneration", status.get("observedGeneration"))
        if generation is not None and observed is not None and observed < generation:
            return False
        return str(cond.get("status", "")).lower() == wanted.lower()
    return False


def kubectl_jsonpath_condition_status(obj: Mapping[str, Any], ctype: str) -> str:
    """`kubectl wait --for=jsonpath='{.status.conditions[?(@.type=="<ctype>")].status}'=...`.

    kubernetes/kubectl pkg/cmd/wait/wait.go (JSONPathWait): more than one value is an error
    ("given jsonpath expression matches more than one value"); none is "not yet".
    """
    values = [c.get("status") for c in (obj.get("status") or {}).get("conditions") or []
              if c.get("type") == ctype]
    if len(values) > 1:
        raise ValueError("given jsonpath expression matches more than one value")
    return values[0] if values else ""


def printer_state(obj: Mapping[str, Any]) -> str:
    """The CRD's State column: `.status.conditions[-1:].type`."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return conds[-1]["type"] if conds else ""


# --- Kueue v0.5-v0.10 (the MXJob integration) ------------------------------------------------
# kubernetes-sigs/kueue v0.10.6 pkg/controller/jobs/kubeflow/jobs/mxjob/mxjob_controller.go and
# pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go.

KUEUE_ORDER = {"MXTrain": ["Scheduler", "Server", "Worker"], "MXTune": ["TunerTracker", "TunerServer", "Tuner"]}


def kueue_ordered_replica_types(job: Mapping[str, Any]) -> list[str]:
    """OrderedReplicaTypes: by jobMode in exact case (anything else: none), keys present verbatim."""
    specs = job["spec"].get("mxReplicaSpecs") or {}
    return [t for t in KUEUE_ORDER.get(job["spec"].get("jobMode"), []) if t in specs]


def kueue_pod_sets(job: Mapping[str, Any]) -> list[tuple[str, int]]:
    """PodSets: (lower-case type, replicas defaulting to 1) per ordered replica type."""
    specs = job["spec"]["mxReplicaSpecs"]
    return [(t.lower(), specs[t].get("replicas", 1)) for t in kueue_ordered_replica_types(job)]


def kueue_run_with_pod_sets_info(job: dict, infos: list[Mapping[str, Any]]) -> dict:
    """RunWithPodSetsInfo: suspend false, and per ordered type merge labels, annotations and
    nodeSelector (a conflicting value is an error), append tolerations and schedulingGates
    without duplicates (pkg/podset/podset.go Merge). Returns the job as Kueue's patch leaves it."""
    job = copy.deepcopy(job)
    types = kueue_ordered_replica_types(job)
    if len(infos) != len(types):
        raise ValueError(f"expecting {len(types)} podsets, got {len(infos)}")
    job["spec"].setdefault("runPolicy", {})["suspend"] = False
    for rtype, info in zip(types, infos, strict=True):
        template = job["spec"]["mxReplicaSpecs"][rtype].setdefault("template", {})
        meta, spec = template.setdefault("metadata", {}), template.setdefault("spec", {})
        for target, key in ((meta, "labels"), (meta, "annotations"), (spec, "nodeSelector")):
            merged = dict(target.get(key) or {})
            for k, v in (info.get(key) or {}).items():
                if merged.get(k, v) != v:
                    raise ValueError(f"conflict for {key} {k}")
                merged[k] = v
            if merged:
                target[key] = merged
        for key in ("tolerations", "schedulingGates"):
            items = list(spec.get(key) or [])
            items += [i for i in info.get(key) or [] if i not in items]
            if items:
                spec[key] = items
    return job


def kueue_pod_sets_info(job: Mapping[str, Any]) -> list[dict]:
    """What Kueue saves before it admits a job, to restore on eviction (podset.FromPodSet)."""
    infos = []
    for rtype in kueue_ordered_replica_types(job):
        template = job["spec"]["mxReplicaSpecs"][rtype].get("template") or {}
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        infos.append(copy.deepcopy({"labels": meta.get("labels"), "annotations": meta.get("annotations"),
                                    "nodeSelector": spec.get("nodeSelector"), "tolerations": spec.get("tolerations"),
                                    "schedulingGates": spec.get("schedulingGates")}))
    return infos


def kueue_restore_pod_sets_info(job: dict, infos: list[Mapping[str, Any]]) -> dict:
    """stopJob: suspend true and RestorePodSetsInfo, which replaces the five fields with the saved ones."""
    job = copy.deepcopy(job)
    job["spec"].setdefault("runPolicy", {})["suspend"] = True
    for rtype, info in zip(kueue_ordered_replica_types(job), infos, strict=True):
        template = job["spec"]["mxReplicaSpecs"][rtype]["template"]
        for parent, key in (("metadata", "labels"), ("metadata", "annotations"), ("spec", "nodeSelector"),
                            ("spec", "tolerations"), ("spec", "schedulingGates")):
            part = template.setdefault(parent, {})
            if info.get(key) is None:
                part.pop(key, None)
            else:
                part[key] = copy.deepcopy(info[key])
        if template.get("metadata") == {}:
            del template["metadata"]
    return job


def kueue_finished(job: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """Finished: the first True Succeeded or Failed, in list order -> (message, success, finished)."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Succeeded", "Failed") and cond.get("status") == "True":
            return cond.get("message", ""), cond["type"] != "Failed", True
    return "", True, False


def kueue_pods_ready(job: Mapping[str, Any]) -> bool:
    """PodsReady: any Running condition that is True."""
    return any(c.get("type") == "Running" and c.get("status") == "True"
               for c in (job.get("status") or {}).get("conditions") or [])


def kueue_is_active(job: Mapping[str, Any]) -> bool:
    """IsActive: any replicaStatuses[*].active other than 0."""
    return any((s or {}).get("active", 0) != 0
               for s in ((job.get("status") or {}).get("replicaStatuses") or {}).values())


def kueue_pod_label_selector(job: Mapping[str, Any]) -> dict[str, str]:
    """PodLabelSelector: job-name and operator-name=mxjob-controller."""
    return {"training.kubeflow.org/job-name": job["metadata"]["name"],
            "training.kubeflow.org/operator-name": "mxjob-controller"}


# --- Argo Workflows resource templates ---------------------------------------------------------

_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9._/-]+)\s*(==|=|!=|>|<)\s*([A-Za-z0-9._-]+)\s*$")


def argo_requirements(selector: str) -> list[tuple[str, str, str]]:
    """Parse a successCondition/failureCondition as labels.Parse does, for the operators Argo
    documents (=, ==, !=, >, <): comma-separated requirements whose keys are label-key shaped
    (so gjson queries with #, ( or " cannot be written)."""
    parsed = []
    for part in selector.split(","):
        match = _REQUIREMENT.match(part)
        if match is None:
            raise ValueError(f"unable to parse requirement: {part!r}")
        parsed.append((match.group(1), match.group(2), match.group(3)))
    return parsed


def _argo_matches(obj: Mapping[str, Any], key: str, op: str, value: str) -> bool:
    found = gjson.get(obj, key, quiet=True)  # quiet: a missing path is None, not an error
    if found is None:  # gjson .Exists() is false: no requirement on it matches
        return op == "!="
    text = str(found).lower() if isinstance(found, bool) else str(found)
    if op in ("=", "=="):
        return text == value
    if op == "!=":
        return text != value
    try:  # labels.Requirement.Matches: > and < compare integers, anything else does not match
        left, right = int(text), int(value)
    except ValueError:
        return False
    return left > right if op == ">" else left < right


def argo_resource_state(obj: Mapping[str, Any], *, success: str, failure: str) -> str:
    """argoproj/argo-workflows workflow/executor/resource.go (WaitResource, checkResourceState):
    failure first, where any requirement matching fails the step; then success, where all must
    match. Returns "failed", "succeeded" or "waiting"."""
    if any(_argo_matches(obj, *r) for r in argo_requirements(failure)):
        return "failed"
    if all(_argo_matches(obj, *r) for r in argo_requirements(success)):
        return "succeeded"
    return "waiting"


# --- Kubeflow Pipelines launcher components -----------------------------------------------------


def kfp_is_expected_conditions(obj: Mapping[str, Any], expected: tuple[str, ...] = ("Succeeded", "Failed")
                               ) -> tuple[bool, str]:
    """kubeflow/pipelines components/kubeflow/common/launch_crd.py (K8sCR.is_expected_conditions,
    tree c2a77134): only the last condition counts; its type in expected and status "True"."""
    conds = (obj.get("status") or {}).get("conditions") or []
    if not conds:
        return False, ""
    last = conds[-1]
    return last.get("type") in expected and last.get("status") == "True", last.get("type", "")


# --- Polyaxon mloperator -------------------------------------------------------------------------


def polyaxon_state(obj: Mapping[str, Any]) -> str | None:
    """polyaxon/mloperator controllers/kfcommon.go (reconcileKFJobStatus, b88425cd): the last
    condition's type alone (its status ignored): Running/Created running, Succeeded succeeded,
    Failed failed, Restarting warning, anything else no change (None)."""
    conds = (obj.get("status") or {}).get("conditions") or []
    if not conds:
        return None
    return {"Running": "running", "Created": "running", "Succeeded": "succeeded", "Failed": "failed",
            "Restarting": "warning"}.get(conds[-1].get("type"))


# --- Label selectors -------------------------------------------------------------------------------


def selector_matches(selector: str | Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """An equality-based label selector ("k=v,k2=v2" or a map), as the API server applies it."""
    if isinstance(selector, str):
        pairs = dict(part.split("=", 1) for part in selector.split(",") if part)
    else:
        pairs = dict(selector)
    return all(labels.get(k) == v for k, v in pairs.items())
