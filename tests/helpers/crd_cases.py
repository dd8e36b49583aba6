"""Every accept/refuse case of the CRD tests, in one place: the emulation's tests (tests/install/test_crd.py,
tests/install/test_chainerjob_crd.py, tests/install/test_crd_versions.py) and the real API server's
(tests/install/test_apiserver_crd_rules.py) read the same tables, so the verdicts are compared case by case.

A create case is an object; an update case is (stored, new); a refusal lists fragments of the
real API server's answer: one per rule it names (the fragment then names exactly one rule), or a
schema check in the server's wording ("Unsupported value"), or "not checked" for the note that the
rules were not run.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers import yamlio
from helpers.crd import ROOT, VALID, mxjob, mxnet, with_field

EXAMPLES = ROOT / "examples"


def load_yaml(path: Path) -> dict:
    return yamlio.load(path.read_text())


def edited(obj: dict, edit: Callable[[dict], Any]) -> dict:
    new = copy.deepcopy(obj)
    edit(new)
    return new


# ---------------------------------------------------------------------------------------------
# The examples


def example_files() -> list[Path]:
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        docs = [d for d in yamlio.load_all(path.read_text()) if d]
        if any(d.get("kind") == "MXJob" for d in docs):
            found.append(path)
    return found


def example_docs() -> list[tuple[str, dict]]:
    return [
        (f"{path.relative_to(EXAMPLES)}#{i}", doc)
        for path in example_files()
        for i, doc in enumerate(yamlio.load_all(path.read_text()))
        if doc and doc.get("kind") == "MXJob"
    ]


EXAMPLE_DOCS = example_docs()


# ---------------------------------------------------------------------------------------------
# MXJob: the OpenAPI schema (each case: a field of VALID set to a value)

SCHEMA_REJECTS = {
    "restartPolicy-Sometimes": ("spec.mxReplicaSpecs.Worker.restartPolicy", "Sometimes"),
    "replicas-negative": ("spec.mxReplicaSpecs.Worker.replicas", -1),
    "replicas-string": ("spec.mxReplicaSpecs.Worker.replicas", "2"),
    "jobMode-unknown": ("spec.jobMode", "MXServe"),
    "cleanPodPolicy-unknown": ("spec.runPolicy.cleanPodPolicy", "Some"),
    "inline-cleanPodPolicy-unknown": ("spec.cleanPodPolicy", "Finished"),
    "activeDeadlineSeconds-zero": ("spec.runPolicy.activeDeadlineSeconds", 0),
    "ttl-negative": ("spec.runPolicy.ttlSecondsAfterFinished", -1),
    "backoffLimit-negative": ("spec.backoffLimit", -1),
    "suspend-string": ("spec.runPolicy.suspend", "yes"),
    "successPolicy-unknown": ("spec.successPolicy", "AnyWorker"),
    "minResources-not-a-quantity": (
        "spec.runPolicy.schedulingPolicy.minResources",
        {"cpu": "lots"},
    ),
    "template-not-an-object": ("spec.mxReplicaSpecs.Worker.template", "pod"),
    # Inside a pod template, as in a Pod: a misspelled field, a wrong type, a field no PodSpec has.
    "template-container-arg-for-args": (
        "spec.mxReplicaSpecs.Worker.template.spec.containers", [{"name": "mxnet", "image": "i", "arg": ["-x"]}]),
    "template-containerPort-a-string": (
        "spec.mxReplicaSpecs.Worker.template.spec.containers",
        [{"name": "mxnet", "image": "i", "ports": [{"containerPort": "x"}]}]),
    "template-unknown-pod-spec-field": ("spec.mxReplicaSpecs.Worker.template.spec.restartPolicyy", "Never"),
    "template-metadata-labels-not-strings": ("spec.mxReplicaSpecs.Worker.template.metadata", {"labels": {"n": 1}}),
    "replicas-over-maximum": ("spec.mxReplicaSpecs.Worker.replicas", 5001),
    "activeDeadlineSeconds-int64-max": ("spec.runPolicy.activeDeadlineSeconds", 2**63 - 1),
    "inline-activeDeadlineSeconds-over-maximum": ("spec.activeDeadlineSeconds", 2**31),
    "ttl-over-maximum": ("spec.runPolicy.ttlSecondsAfterFinished", 2**31),
    "backoffLimit-over-maximum": ("spec.runPolicy.backoffLimit", 2**31),
    "mxReplicaSpecs-empty": ("spec.mxReplicaSpecs", {}),
    "mxReplicaSpecs-seven-types": (
        "spec.mxReplicaSpecs",
        {t: {"template": mxnet()} for t in "ABCDEFG"},
    ),
}

SCHEMA_ACCEPTS = {
    "activeDeadlineSeconds-one": ("spec.runPolicy.activeDeadlineSeconds", 1),
    "ttl-zero": ("spec.runPolicy.ttlSecondsAfterFinished", 0),
    "backoffLimit-zero": ("spec.runPolicy.backoffLimit", 0),
    "successPolicy-empty": ("spec.successPolicy", ""),
    "minResources-quantities": (
        "spec.schedulingPolicy.minResources",
        {"cpu": "500m", "memory": "4Gi", "nvidia.com/gpu": 2},
    ),
    "legacy-label": ("spec.mxReplicaSpecs.Worker.label", "gpu-v100"),
    # A pod template is Kubernetes' PodTemplateSpec (scripts/gen_crd_pod_schema.py): what a Pod takes.
    "template-rich": ("spec.mxReplicaSpecs.Worker.template", {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {
            "containers": [{
                "name": "mxnet", "image": "mxjob/mxnet:1.9.1", "command": ["python"], "args": ["train.py"],
                "env": [{"name": "A", "value": "1"},
                        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                "ports": [{"name": "http", "containerPort": 9091}, {"containerPort": 9091, "protocol": "UDP"}],
                # Quantities are integers or strings, as in the old operators' CRDs.
                "resources": {"limits": {"cpu": 2, "memory": "4Gi", "nvidia.com/gpu": 1}, "requests": {"cpu": "0.5"}},
                "readinessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
                "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                "securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
            }],
            "volumes": [{"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}],
            "imagePullSecrets": [{"name": "registry"}],
            "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}],
            "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        },
    }),
}

# A field the schema requires, taken out of VALID.
SCHEMA_REQUIRES = {
    "spec": ("spec",),
    "mxReplicaSpecs": ("spec", "mxReplicaSpecs"),
}


def without(obj: dict, path: tuple[str, ...]) -> dict:
    obj = copy.deepcopy(obj)
    node = obj
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return obj


# ---------------------------------------------------------------------------------------------
# MXJob: the status, written through the status subresource

REPRESENTATIVE_STATUS = {
    "conditions": [
        {
            "type": "Created",
            "status": "True",
            "reason": "MXJobCreated",
            "message": "MXJob default/job is created.",
            "lastUpdateTime": "2025-01-02T03:04:05Z",
            "lastTransitionTime": "2025-01-02T03:04:05Z",
        },
        {
            "type": "Running",
            "status": "False",
            "reason": "MXJobRunning",
            "message": "MXJob default/job is running.",
            "lastUpdateTime": "2025-01-02T03:05:00Z",
            "lastTransitionTime": "2025-01-02T03:05:00Z",
        },
        {
            "type": "Succeeded",
            "status": "True",
            "reason": "MXJobSucceeded",
            "message": "MXJob default/job succeeded: its Scheduler exited with code 0.",
            "lastUpdateTime": "2025-01-02T04:00:00Z",
            "lastTransitionTime": "2025-01-02T04:00:00Z",
        },
    ],
    "replicaStatuses": {
        "Scheduler": {"active": 0, "succeeded": 1, "failed": 0, "completedIndexes": "0"},
        "Worker": {"active": 0, "succeeded": 2, "failed": 1, "completedIndexes": "0-1"},
    },
    "startTime": "2025-01-02T03:04:05Z",
    "completionTime": "2025-01-02T04:00:00Z",
    "observedGeneration": 3,
    "restartCount": 1,
    "attempt": 1,
    "waiting": "Scheduler: Unschedulable",  # never on a finished job in life; here so every field is written
    "restartHistory": {
        "job-worker-1": {"lastFailedUID": "0b4f", "recreations": 1, "priorContainerRestarts": 2}
    },
    "progress": {
        "reporter": "worker-1", "attempt": 1, "step": 90, "total": 120, "progressPercentage": 75,
        "metrics": [{"name": "loss", "value": "0.25"}], "lastUpdatedTime": "2025-01-02T03:59:30Z",
        "reporters": [
            {"name": "worker-0", "attempt": 1, "step": 100, "total": 120, "progressPercentage": 83,
             "lastUpdatedTime": "2025-01-02T03:59:00Z"},
            {"name": "worker-1", "attempt": 1, "step": 90, "total": 120, "progressPercentage": 75,
             "metrics": [{"name": "loss", "value": "0.25"}], "lastUpdatedTime": "2025-01-02T03:59:30Z"},
        ],
    },
    "cleanedUpTime": "2025-01-03T04:00:00Z",
    "specError": "",
    "statusWarnings": ["status.startTime is not an RFC 3339 time with a zone; it was ignored"],
}

STATUS_REJECTS = {
    "condition-type-unknown": ("conditions", [{"type": "Done", "status": "True"}]),
    "condition-status-yes": ("conditions", [{"type": "Running", "status": "Yes"}]),
    "condition-without-status": ("conditions", [{"type": "Running"}]),
    "startTime-not-a-time": ("startTime", "yesterday"),
    "observedGeneration-string": ("observedGeneration", "3"),
    "replicaStatus-active-string": ("replicaStatuses", {"Worker": {"active": "1"}}),
    "statusWarnings-eleven": ("statusWarnings", ["w"] * 11),
}


# ---------------------------------------------------------------------------------------------
# MXJob: the CEL rules on create

CEL_ACCEPTS = {
    "distributed-canonical-keys": mxjob({"Scheduler": 1, "Server": 2, "Worker": 4}),
    "distributed-lowercase-keys": mxjob({"scheduler": 1, "server": 1, "worker": 1}),
    "distributed-uppercase-keys": mxjob({"SCHEDULER": None, "SERVER": 3, "WORKER": 2}),
    "scheduler-replicas-left-out": mxjob({"Scheduler": None, "Server": None, "Worker": None}),
    "worker-only": mxjob({"Worker": 1}),
    "worker-only-many": mxjob({"worker": 8}),
    "explicit-mxtrain": mxjob({"Worker": 1}, jobMode="MXTrain"),
    "tune": mxjob({"TunerTracker": 1, "TunerServer": 2, "Tuner": 1}, jobMode="MXTune"),
    "tune-mixed-case-keys": mxjob(
        {"tunerTracker": None, "tunerserver": 5, "TUNER": None}, jobMode="MXTune"
    ),
}

CEL_REJECTS = {
    "scheduler-two-replicas": (
        mxjob({"Scheduler": 2, "Server": 1, "Worker": 1}),
        ["run exactly one pod"],
    ),
    "lowercase-scheduler-zero-replicas": (
        mxjob({"scheduler": 0, "server": 1, "worker": 1}),
        ["run exactly one pod"],
    ),
    "worker-zero-replicas": (mxjob({"Worker": 0}), ["at least 1"]),
    "server-zero-replicas": (
        mxjob({"Scheduler": 1, "Server": 0, "Worker": 1}),
        ["at least 1"],
    ),
    "unknown-type": (mxjob({"Worker": 1, "Chief": 1}), ["unknown replica type"]),
    "same-type-twice-in-different-case": (
        mxjob({"Worker": 1, "worker": 1}),
        ["differ only in letter case"],
    ),
    "train-without-worker": (
        mxjob({"Scheduler": 1, "Server": 1}),
        ["an MXTrain job needs a Worker"],
    ),
    "scheduler-without-server": (
        mxjob({"Scheduler": 1, "Worker": 2}),
        ["both a Scheduler and a Server"],
    ),
    "server-without-scheduler": (
        mxjob({"Server": 1, "Worker": 2}),
        ["both a Scheduler and a Server"],
    ),
    "train-with-tuner-types": (
        mxjob({"Worker": 1, "Tuner": 1}),
        ["belong to tuning jobs"],
    ),
    "tune-without-tuner": (
        mxjob({"TunerTracker": 1, "TunerServer": 1}, jobMode="MXTune"),
        ["needs a TunerTracker, a TunerServer and a"],
    ),
    "tune-with-worker": (
        mxjob({"TunerTracker": 1, "TunerServer": 1, "Tuner": 1, "Worker": 1}, jobMode="MXTune"),
        ["belong to training jobs"],
    ),
    "tune-two-trackers": (
        mxjob({"TunerTracker": 2, "TunerServer": 1, "Tuner": 1}, jobMode="MXTune"),
        ["run exactly one pod"],
    ),
    "tune-two-lowercase-tuners": (
        mxjob({"TunerTracker": 1, "TunerServer": 1, "tuner": 2}, jobMode="MXTune"),
        ["run exactly one pod"],
    ),
    "tune-no-tuner-servers": (
        mxjob({"TunerTracker": 1, "TunerServer": 0, "Tuner": 1}, jobMode="MXTune"),
        ["at least 1"],
    ),
}

# A schema error of a blocking kind (an enum here) stops the API server from running the rules:
# only the schema's error is reported, with a note, not the rule this object breaks too.
BLOCKED_RULES = {
    "unknown-type-and-restart-policy-sometimes": (
        edited(mxjob({"Worker": 1, "Chief": 1}), lambda o: o["spec"]["mxReplicaSpecs"]["Worker"].update(restartPolicy="Sometimes")),
        ["Unsupported value", "not checked"],
    ),
    "unknown-type-and-replicas-string": (
        with_field(mxjob({"Worker": 1, "Chief": 1}), "spec.mxReplicaSpecs.Chief.replicas", "1"),
        ["must be of type integer", "not checked"],
    ),
}
# A bound (a minimum here) does not block: the rules run, and both are reported.
UNBLOCKED_RULES = {
    "unknown-type-and-ttl-negative": (
        with_field(mxjob({"Worker": 1, "Chief": 1}), "spec.runPolicy", {"ttlSecondsAfterFinished": -1}),
        ["greater than or equal to 0", "unknown replica type"],
    ),
}


# ---------------------------------------------------------------------------------------------
# MXJob: updates (the transition rules)

BASE = mxjob({"Scheduler": 1, "Server": 2, "Worker": 2})
BASE_NO_MODE = mxjob({"Worker": 1})
BASE_TUNE = mxjob({"TunerTracker": 1, "TunerServer": 1, "Tuner": 1}, jobMode="MXTune")

UPDATE_ACCEPTS = {
    "nothing-changed": (BASE, BASE),
    "suspend": (BASE, edited(BASE, lambda o: o["spec"].update(runPolicy={"suspend": True}))),
    "deadline-added": (BASE, edited(BASE, lambda o: o["spec"].update(activeDeadlineSeconds=60))),
    "labels-changed": (BASE, edited(BASE, lambda o: o["metadata"].update(labels={"a": "b"}))),
    "default-mode-written-out": (
        BASE_NO_MODE,
        edited(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTrain")),
    ),
    "default-mode-dropped": (
        edited(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTrain")),
        BASE_NO_MODE,
    ),
}


def _set_replicas(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] = 3


def _set_image(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = "x:2"


def _add_env(o):
    container = o["spec"]["mxReplicaSpecs"]["Server"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "A", "value": "1"}]


def _set_restart_policy(o):
    o["spec"]["mxReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"


def _rename_key(o):
    specs = o["spec"]["mxReplicaSpecs"]
    specs["worker"] = specs.pop("Worker")


def _worker_template(template: dict) -> Callable[[dict], None]:
    def edit(o: dict) -> None:
        o["spec"]["mxReplicaSpecs"]["Worker"]["template"] = copy.deepcopy(template)
    return edit


IMMUTABLE_SPECS = "spec.mxReplicaSpecs is immutable"
IMMUTABLE_LAYOUT = "the replica types and their replicas are immutable"
IMMUTABLE_MODE = "spec.jobMode is immutable"


def suspended(obj: dict, value: bool = True) -> dict:
    return edited(obj, lambda o: o["spec"].setdefault("runPolicy", {}).update(suspend=value))


# What Kueue v0.5-v0.10 writes into every replica template when it admits a job (RunWithPodSetsInfo),
# here with topology-aware scheduling: labels, an annotation, nodeSelector, tolerations and a gate.
KUEUE_INFO = {
    "labels": {"kueue.x-k8s.io/podset": "worker", "kueue.x-k8s.io/tas": "true"},
    "annotations": {"kueue.x-k8s.io/workload": "mxjob-x-abcde"},
    "nodeSelector": {"instance-type": "on-demand"},
    "tolerations": [{"key": "spot", "operator": "Exists", "effect": "NoSchedule"}],
    "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}],
}


def kueue_injects(o: dict) -> None:
    for spec in o["spec"]["mxReplicaSpecs"].values():
        meta = spec["template"].setdefault("metadata", {})
        meta.setdefault("labels", {}).update(KUEUE_INFO["labels"])
        meta.setdefault("annotations", {}).update(KUEUE_INFO["annotations"])
        pod = spec["template"]["spec"]
        pod["nodeSelector"] = dict(KUEUE_INFO["nodeSelector"])
        pod["tolerations"] = list(KUEUE_INFO["tolerations"])
        pod["schedulingGates"] = list(KUEUE_INFO["schedulingGates"])


SUSPENDED = suspended(BASE)
ADMITTED = edited(suspended(BASE, False), kueue_injects)  # Kueue's admission: one update

# Templates whose keys differ but whose number of keys is the same: the API server's `==` skips a key
# found on one side only in an object it has no schema for, so with a template declared as one plain
# x-kubernetes-preserve-unknown-fields object these compared equal and a running job's template could
# lose its pod spec. The template's keys are declared (Kubernetes' PodTemplateSpec), so they do not.
POD_SPEC = mxnet()["spec"]
SPEC_ONLY = edited(BASE, _worker_template({"spec": POD_SPEC}))

KUEUE_UPDATE_ACCEPTS = {
    "kueue-admits-suspended-job-with-template-fields": (SUSPENDED, ADMITTED),
    "kueue-evicts-and-restores-templates": (ADMITTED, SUSPENDED),
    "suspended-job-template-fields-edited": (SUSPENDED, edited(SUSPENDED, kueue_injects)),
    # The rule compares templates only whole (`==`), so while a job is suspended any template change
    # is let through; it has no pods, and every pod is built from the templates at resume.
    "image-changed-while-suspended": (SUSPENDED, edited(SUSPENDED, _set_image)),
    "image-changed-on-admission": (SUSPENDED, edited(ADMITTED, _set_image)),
    "template-spec-replaced-by-metadata-while-suspended": (
        suspended(SPEC_ONLY), edited(suspended(SPEC_ONLY), _worker_template({"metadata": {"labels": {"a": "b"}}}))),
}

UPDATE_REJECTS = {
    "worker-replicas-changed": (BASE, edited(BASE, _set_replicas), [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT]),
    "template-fields-of-a-running-job": (BASE, edited(BASE, kueue_injects), [IMMUTABLE_SPECS]),
    "replicas-changed-while-suspended": (SUSPENDED, edited(SUSPENDED, _set_replicas), [IMMUTABLE_LAYOUT]),
    "restart-policy-changed-while-suspended": (SUSPENDED, edited(SUSPENDED, _set_restart_policy),
                                               [IMMUTABLE_SPECS]),
    "key-respelled-while-suspended": (SUSPENDED, edited(SUSPENDED, _rename_key), [IMMUTABLE_LAYOUT]),
    "image-changed-inside-template": (
        BASE,
        edited(BASE, _set_image),
        [IMMUTABLE_SPECS],
    ),
    "env-added-inside-template": (BASE, edited(BASE, _add_env), [IMMUTABLE_SPECS]),
    "restart-policy-changed": (BASE, edited(BASE, _set_restart_policy), [IMMUTABLE_SPECS]),
    "key-respelled": (BASE, edited(BASE, _rename_key), [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT]),
    "train-to-tune": (BASE, BASE_TUNE, [IMMUTABLE_SPECS, IMMUTABLE_LAYOUT, IMMUTABLE_MODE]),
    "default-mode-to-tune": (
        BASE_NO_MODE,
        edited(BASE_NO_MODE, lambda o: o["spec"].update(jobMode="MXTune")),
        [IMMUTABLE_MODE],
    ),
    # The disjoint-key cases: the same number of keys in the template, other keys.
    "template-spec-replaced-by-metadata-on-running-job": (
        SPEC_ONLY, edited(SPEC_ONLY, _worker_template({"metadata": {"labels": {"a": "b"}}})), [IMMUTABLE_SPECS]),
}


# ---------------------------------------------------------------------------------------------
# MXJob: ratcheting. An object stored before the CRD had its rules (here: by a CRD with the same
# schema stripped of every value check, `loosened`) may break one; on an update the API server
# lets an error through when the node it is raised at did not change (crd.unchanged), so such a job
# can still take label, suspend and status writes. It cannot ratchet a node with a map it has no
# schema for; every map of a pod template is declared (Kubernetes' PodTemplateSpec), so a job with
# any valid template ratchets.

LOOSENED_KEYS = ("x-kubernetes-validations", "enum", "minimum", "maximum", "pattern",
                 "minProperties", "maxProperties", "maxItems", "maxLength")


def loosened(node: Any) -> Any:
    """A schema without its value checks: what an older CRD, or another operator's, let be stored."""
    if isinstance(node, dict):
        return {k: loosened(v) for k, v in node.items() if k not in LOOSENED_KEYS}
    if isinstance(node, list):
        return [loosened(v) for v in node]
    return node


def _labels(o: dict) -> None:
    o["metadata"]["labels"] = {"team": "a"}


def _suspend(o: dict) -> None:
    o["spec"].setdefault("runPolicy", {})["suspend"] = True


def _deadline(o: dict) -> None:
    o["spec"]["activeDeadlineSeconds"] = 60


def _ttl_minus_two(o: dict) -> None:
    o["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = -2


# A pod template whose maps go as deep as a PodSpec's do (spec.affinity.nodeAffinity.required...).
RICH_TEMPLATE = {
    "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
    "spec": {
        "containers": [{"name": "mxnet", "image": "mxjob/mxnet:1.9.1", "resources": {"limits": {"cpu": "1"}}}],
        "nodeSelector": {"disk": "ssd"},
        "securityContext": {"seLinuxOptions": {"level": "s0:c123,c456"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
    },
}

ZERO_WORKERS = mxjob({"Worker": 0})
NO_WORKER = mxjob({"Scheduler": 1, "Server": 1})
UNKNOWN_TYPE = mxjob({"Worker": 1, "Chief": 1})
RESTART_SOMETIMES = with_field(mxjob({"Worker": 1}), "spec.mxReplicaSpecs.Worker.restartPolicy", "Sometimes")
TTL_NEGATIVE = with_field(mxjob({"Worker": 1}), "spec.runPolicy", {"ttlSecondsAfterFinished": -1})
MODE_UNKNOWN = mxjob({"Worker": 1}, jobMode="MXServe")

# name: (stored, edit, fragments of the refusal, or None when the update is accepted)
RATCHET_UPDATES: dict[str, tuple[dict, Callable[[dict], None], list[str] | None]] = {
    "zero-workers-labels-changed": (ZERO_WORKERS, _labels, None),
    "zero-workers-suspended": (ZERO_WORKERS, _suspend, None),
    "zero-workers-rich-template-labels-changed": (edited(ZERO_WORKERS, _worker_template(RICH_TEMPLATE)), _labels, None),
    "unknown-type-deadline-added": (UNKNOWN_TYPE, _deadline, None),
    # A rule on spec runs again once anything under spec changes.
    "no-worker-labels-changed": (NO_WORKER, _labels, None),
    "no-worker-suspended": (NO_WORKER, _suspend, ["an MXTrain job needs a Worker"]),
    # Schema checks ratchet field by field.
    "restart-policy-sometimes-labels-changed": (RESTART_SOMETIMES, _labels, None),
    "restart-policy-sometimes-suspended": (RESTART_SOMETIMES, _suspend, None),
    "ttl-negative-suspended": (TTL_NEGATIVE, _suspend, None),
    "ttl-negative-changed-to-another-negative": (TTL_NEGATIVE, _ttl_minus_two, ["greater than or equal to 0"]),
    "job-mode-unknown-suspended": (MODE_UNKNOWN, _suspend, None),
}

# name: (stored, the status written through the status subresource)
RATCHET_STATUS_WRITES = {
    "zero-workers": (ZERO_WORKERS, {"specError": "spec.mxReplicaSpecs.Worker.replicas: must be at least 1"}),
    "zero-workers-rich-template": (edited(ZERO_WORKERS, _worker_template(RICH_TEMPLATE)), {"specError": "x"}),
    "no-worker": (NO_WORKER, {"specError": "spec.mxReplicaSpecs: an MXTrain job needs a Worker"}),
    "unknown-type": (UNKNOWN_TYPE, {"specError": "x"}),
}


# ---------------------------------------------------------------------------------------------
# MXJob: the hook and the CRD agree (the numeric bounds: the hook rejects exactly past the maximums)

BOUND_CASES = {
    "deadline-at-maximum": (with_field(VALID, "spec.runPolicy.activeDeadlineSeconds", 2**31 - 1), True),
    "deadline-over-maximum": (with_field(VALID, "spec.runPolicy.activeDeadlineSeconds", 2**31), False),
    "ttl-at-maximum": (with_field(VALID, "spec.ttlSecondsAfterFinished", 2**31 - 1), True),
    "ttl-over-maximum": (with_field(VALID, "spec.ttlSecondsAfterFinished", 2**31), False),
    "backoff-at-maximum": (with_field(VALID, "spec.runPolicy.backoffLimit", 2**31 - 1), True),
    "backoff-over-maximum": (with_field(VALID, "spec.runPolicy.backoffLimit", 2**31), False),
    "replicas-over-maximum": (with_field(VALID, "spec.mxReplicaSpecs.Worker.replicas", 5001), False),
}

AGREEMENT_CASES = {
    **{f"bound-{k}": v for k, v in BOUND_CASES.items()},
    **{f"accepts-{k}": (obj, True) for k, obj in CEL_ACCEPTS.items()},
    **{f"rejects-{k}": (obj, False) for k, (obj, _) in CEL_REJECTS.items()},
    **{f"example-{k}": (doc, True) for k, doc in EXAMPLE_DOCS},
}


# ---------------------------------------------------------------------------------------------
# MXJob: the older served versions (tests/versions/: an old version's manifest, then its v1 twin)

OLD_VERSIONS = ("v1beta1", "v1alpha2")
VERSION_CASES_DIR = ROOT / "tests" / "versions"
VERSION_CASES = sorted(VERSION_CASES_DIR.glob("*.yaml"))


def load_version_case(path: Path) -> tuple[dict, dict]:
    old, new = (d for d in yamlio.load_all(path.read_text()) if d)
    return old, new


def in_version(doc: dict, version: str) -> dict:
    return {**copy.deepcopy(doc), "apiVersion": f"kubeflow.org/{version}"}


VERSION_DIST, _ = load_version_case(VERSION_CASES_DIR / "v1alpha2-dist.yaml")


def _replicas_four(o: dict) -> None:
    o["spec"]["mxReplicaSpecs"]["Worker"]["replicas"] = 4


def _tune(o: dict) -> None:
    o["spec"]["jobMode"] = "MXTune"


# Per old version, the same edits v1 refuses: (stored, new, fragments of the refusal)
VERSION_UPDATE_REJECTS = {
    f"{version}-{name}": (in_version(VERSION_DIST, version), edited(in_version(VERSION_DIST, version), edit), fragments)
    for version in OLD_VERSIONS
    for name, edit, fragments in (
        ("replicas-changed", _replicas_four, [IMMUTABLE_LAYOUT, IMMUTABLE_SPECS]),
        ("mode-changed", _tune, [IMMUTABLE_MODE]),
    )
}


def _restart_sometimes(o: dict) -> None:
    o["spec"]["mxReplicaSpecs"]["Server"]["restartPolicy"] = "Sometimes"


def _chief(o: dict) -> None:
    o["spec"]["mxReplicaSpecs"]["Chief"] = copy.deepcopy(o["spec"]["mxReplicaSpecs"]["Worker"])


# Per old version, what v1 refuses on create: (object, fragments of the refusal)
VERSION_CREATE_REJECTS = {
    f"{version}-{name}": (edited(in_version(VERSION_DIST, version), edit), fragments)
    for version in OLD_VERSIONS
    for name, edit, fragments in (
        ("restart-policy-sometimes", _restart_sometimes, ["Unsupported value", "not checked"]),
        ("unknown-type", _chief, ["unknown replica type"]),
        # The enum error blocks the rules: the unknown type is not reported with it.
        ("restart-policy-sometimes-and-unknown-type", lambda o: (_restart_sometimes(o), _chief(o)),
         ["Unsupported value", "not checked"]),
    )
}


# ---------------------------------------------------------------------------------------------
# ChainerJob (each case: a field of the seed manifest chainerjob-mn.yaml set to a value)

CHAINERJOB_BASE = load_yaml(EXAMPLES / "chainerjob" / "chainerjob-mn.yaml")
CHAINERJOB_EXAMPLES = sorted((EXAMPLES / "chainerjob").glob("*.yaml"))

CHAINERJOB_SCHEMA_REJECTS = {
    "negative-replicas": ("spec.workerSets.ws0.replicas", -1),
    "zero-slots": ("spec.workerSets.ws0.mpiConfig", {"slots": 0}),
    "negative-backoff": ("spec.master.backoffLimit", -1),
    "zero-deadline": ("spec.master.activeDeadlineSeconds", 0),
    "string-replicas": ("spec.workerSets.ws0.replicas", "two"),
    # The hook's bounds, declared in the schema too (hooks.chainerjob.spec.MAX_WORKERS, int32 fields).
    "replicas-over-the-bound": ("spec.workerSets.ws0.replicas", 1001),
    "backoff-over-int32": ("spec.master.backoffLimit", 2**31),
    "slots-over-int32": ("spec.workerSets.ws0.mpiConfig", {"slots": 2**31}),
    "deadline-over-int64": ("spec.master.activeDeadlineSeconds", 2**63),
    "string-suspend": ("spec.runPolicy", {"suspend": "yes"}),
}

CHAINERJOB_SCHEMA_ACCEPTS = {
    # A maximum of 2^63-1 on the schema made the real API server refuse every deadline (it decodes
    # to a float64 above int64's range); the schema has no maximum, int64 is the bound.
    "deadline-int64-max": ("spec.master.activeDeadlineSeconds", 2**63 - 1),
    "replicas-at-the-bound": ("spec.workerSets.ws0.replicas", 1000),
    "backoff-int32-max": ("spec.master.backoffLimit", 2**31 - 1),
    "suspended": ("spec.runPolicy", {"suspend": True}),
}


def chainerjob_with(dotted: str, value: Any) -> dict:
    doc = copy.deepcopy(CHAINERJOB_BASE)
    *path, last = dotted.split(".")
    node = doc
    for key in path:
        node = node[key]
    node[last] = value
    return doc
