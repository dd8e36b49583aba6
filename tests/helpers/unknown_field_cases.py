"""Manifests with unknown, misspelled or mistyped fields, for the differential test of field validation
(tests/localcluster/test_validate.py): each is applied with kubectl to the real API server and
submitted as `localcluster run` submits it, and the two must report the same fields in the same order.

A case is the text of one manifest (YAML, as a user writes it: some cases are about YAML itself),
`refused` when kubectl cannot even send it (it refuses before the server sees it, whatever
--validate says), and `note`, why the case is there. `ok` names the stored spec's check: False
when the server refuses the object for another reason (a CEL rule, a wrong type), so only the
warnings are compared.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import yaml

CONTAINER = {"name": "mxnet", "image": "mxjob/mxnet:1.9.1", "command": ["python", "train.py"]}


def _template(**spec: Any) -> dict:
    return {"metadata": {"labels": {"app": "mx"}}, "spec": {"containers": [dict(CONTAINER)], **spec}}


MXJOB: dict = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "MXJob",
    "metadata": {"name": "fields", "labels": {"team": "a"}},
    "spec": {
        "jobMode": "MXTrain",
        "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": 2,
                      "schedulingPolicy": {"minAvailable": 3, "queue": "q", "minResources": {"cpu": "3"}}},
        "mxReplicaSpecs": {
            "Scheduler": {"replicas": 1, "restartPolicy": "Never", "template": _template()},
            "Server": {"replicas": 1, "restartPolicy": "Never", "template": _template()},
            "Worker": {"replicas": 2, "restartPolicy": "ExitCode", "template": _template()},
        },
    },
}
# mxnet-operator's layout: the run policy inline under spec.
MXJOB_INLINE: dict = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "MXJob",
    "metadata": {"name": "fields"},
    "spec": {
        "cleanPodPolicy": "None", "ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 600, "backoffLimit": 1,
        "successPolicy": "AllWorkers", "schedulingPolicy": {"queue": "q"},
        "mxReplicaSpecs": {"Worker": {"replicas": 1, "template": _template()}},
    },
}
MXTUNE: dict = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "MXJob",
    "metadata": {"name": "fields"},
    "spec": {
        "jobMode": "MXTune",
        "mxReplicaSpecs": {
            "TunerTracker": {"replicas": 1, "template": _template()},
            "TunerServer": {"replicas": 2, "label": "2080ti", "template": _template()},
            "Tuner": {"replicas": 1, "template": _template()},
        },
    },
}
CHAINERJOB: dict = {
    "apiVersion": "kubeflow.org/v1alpha1",
    "kind": "ChainerJob",
    "metadata": {"name": "fields"},
    "spec": {
        "backend": "mpi",
        "master": {"activeDeadlineSeconds": 600, "backoffLimit": 2, "mpiConfig": {"slots": 1},
                   "template": {"spec": {"containers": [{"name": "chainer", "image": "chainer:7"}]}}},
        "workerSets": {"ws": {"replicas": 2, "mpiConfig": {"slots": 1},
                              "template": {"spec": {"containers": [{"name": "chainer", "image": "chainer:7"}]}}}},
    },
}

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Case:
    id: str
    manifest: str
    note: str
    refused: bool = False  # kubectl cannot read or decode it: nothing reaches the server
    ok: bool = True  # the server accepts it (its stored spec is compared too)


def edit(base: dict, changes: dict[Path, Any]) -> str:
    """base with each path set to its value (a path through a missing map makes it), as YAML."""
    obj = copy.deepcopy(base)
    for path, value in changes.items():
        node = obj
        for step in path[:-1]:
            node = node.setdefault(step, {}) if isinstance(step, str) else node[step]
        node[path[-1]] = value
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # every value written out, no &id001 anchors


def version(base: dict, api_version: str, changes: dict[Path, Any]) -> str:
    return edit({**base, "apiVersion": api_version}, changes)


W = ("spec", "mxReplicaSpecs", "Worker")
RP = ("spec", "runPolicy")
M = ("spec", "master")
WS = ("spec", "workerSets", "ws")
OWNER = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "7f0b5a36-0000-4000-8000-000000000001"}

CASES: list[Case] = [
    # MXJob, training-operator layout
    Case("mxjob-clean", edit(MXJOB, {}), "a valid job: nothing to report"),
    Case("top-level", edit(MXJOB, {("specs",): {"x": 1}, ("Status",): 1}), "keys beside spec and status"),
    Case("status-on-create", edit(MXJOB, {("status", "bogus"): 1, ("status", "conditions"): [
        {"type": "Created", "status": "True", "reasn": "r"}], ("status", "replicaStatuses", "Worker", "activ"): 1}),
        "status is pruned and reported on create, though the status subresource then drops it"),
    Case("metadata", edit(MXJOB, {("metadata", "lables"): {"a": "b"}, ("metadata", "Labels"): {"a": "b"}}),
         "ObjectMeta's keys are case-sensitive"),
    Case("metadata-nested", edit(MXJOB, {("metadata", "ownerReferences"): [{**OWNER, "bogus": 1}],
                                         ("metadata", "managedFields"): [{"manager": "m", "operaton": "Apply"}]}),
         "unknown keys inside ObjectMeta's own structs"),
    Case("metadata-first-depth-first", edit(MXJOB, {("aaa",): 1, ("metadata", "zzz"): 1, ("metadata", "managedFieldsA"): 1,
                                                    ("metadata", "managedFields"): [{"manager": "m", "x": 1}]}),
         "metadata's paths come first, depth first over sorted keys ([ after A), then the rest sorted"),
    Case("spec", edit(MXJOB, {("spec", "jobmode"): "MXTrain", ("spec", "cleanPodPolcy"): "All"}), "misspelled spec fields"),
    Case("run-policy", edit(MXJOB, {(*RP, "cleanPodPolcy"): "All", (*RP, "backofLimit"): 1, (*RP, "Suspend"): True}),
         "misspelled runPolicy fields"),
    Case("scheduling-policy", edit(MXJOB, {(*RP, "schedulingPolicy", "queu"): "q",
                                           (*RP, "schedulingPolicy", "priorityClassName"): "high"}),
         "Volcano's priorityClassName is this API's priorityClass"),
    Case("replica-spec", edit(MXJOB, {(*W, "replica"): 2, (*W, "restartpolicy"): "Never", (*W, "templates"): {}}),
         "misspelled replica spec fields"),
    Case("replica-spec-lower-case-key", edit(MXJOB, {("spec", "mxReplicaSpecs"): {
        "worker": {"replicas": 1, "replica": 1, "template": _template()}}}),
        "a replica type in another letter case is a map key like any other"),
    Case("replica-type-misspelled", edit(MXJOB, {("spec", "mxReplicaSpecs", "Wroker"): {"template": _template()}}),
         "a misspelled replica type is a map key: no warning (a CEL rule refuses it)", ok=False),
    Case("inside-templates", edit(MXJOB, {
        (*W, "template", "metadata", "lables"): {"a": "b"},
        (*W, "template", "spec", "containers", 0, "imagePullPolcy"): "Always",
        (*W, "template", "spec", "restartpolicy"): "Never",
        (*W, "template", "sepc"): {}}), "templates preserve unknown fields: nothing is reported"),
    Case("wrong-type-map-for-scalar", edit(MXJOB, {("spec", "jobMode"): {"a": 1}, (*W, "replicas"): {"b": {"c": 1}}}),
         "a map where the schema has no properties: every key is pruned, then validation refuses", ok=False),
    Case("wrong-type-list-for-object", edit(MXJOB, {("spec", "runPolicy"): [{"a": 1}, "x", [{"b": 2}]]}),
         "a list where the schema has no items: every key of every map in it is pruned", ok=False),
    Case("wrong-type-scalar-for-object", edit(MXJOB, {("spec", "runPolicy"): "x", (*W, "template"): "y"}),
         "a scalar is never pruned, only refused", ok=False),
    Case("wrong-type-in-lists-and-maps", edit(MXJOB, {("status", "statusWarnings"): [{"a": 1}, "ok"],
                                                      ("status", "conditions"): {"type": "Created"},
                                                      (*RP, "schedulingPolicy", "minResources", "cpu"): {"m": 1}}),
         "maps in a list of strings, a map where a list belongs, a map for a quantity", ok=False),
    Case("root-list", edit(MXJOB, {("status",): [{"a": 1}]}), "status as a list (pruned by shape; then dropped on create)"),
    Case("whole-subtree", edit(MXJOB, {("spec", "extra"): {"deep": {"deeper": [1, {"x": 1}]}}}),
         "an unknown key's subtree is pruned with it and not looked into"),
    Case("type-meta-nested", edit(MXJOB, {("spec", "kind"): "X", (*W, "apiVersion"): "v1", ("spec", "metadata"): {"name": "x"}}),
         "apiVersion, kind and metadata are kept only at the root"),
    Case("sorted-as-strings", edit(MXJOB, {(*RP, "x"): 1, ("spec", "runPolicy-b"): 1, ("status", "conditions"): [
        {"type": "Created", "status": "True", "q": n} for n in range(12)]}),
         "pruned paths sort as strings: runPolicy-b before runPolicy.x, [10] before [2]"),
    Case("odd-keys", edit(MXJOB, {("spec", "a.b"): 1, ("spec", "sp ace"): 1, ("spec", "ünï"): 1, (*W, 'we"ird'): 1}),
         "keys are written as they are, unquoted"),
    # MXJob, mxnet-operator's inline layout and older versions
    Case("inline-clean", edit(MXJOB_INLINE, {}), "the inline layout is declared"),
    Case("inline", edit(MXJOB_INLINE, {("spec", "succesPolicy"): "AllWorkers", ("spec", "ttlSecondAfterFinished"): 1,
                                       ("spec", "schedulingPolicy", "minAvailabl"): 1}),
         "misspelled inline fields, inline schedulingPolicy"),
    Case("v1beta1", version(MXJOB_INLINE, "kubeflow.org/v1beta1", {("spec", "cleanPodPolcy"): "All", ("spec", "x"): 1}),
         "an older version: its deprecation warning, then the fields"),
    Case("v1alpha2", version(MXJOB_INLINE, "kubeflow.org/v1alpha2", {(*W, "replica"): 1, ("metadata", "nmae"): "x"}),
         "the oldest served version"),
    Case("mxtune", edit(MXTUNE, {("spec", "mxReplicaSpecs", "TunerServer", "lable"): "x",
                                 ("spec", "mxReplicaSpecs", "Tuner", "replicas"): 1}), "a tuning job, label misspelled"),
    # ChainerJob
    Case("chainerjob-clean", edit(CHAINERJOB, {}), "a valid ChainerJob"),
    Case("chainerjob-spec", edit(CHAINERJOB, {("spec", "backnd"): "mpi", ("spec", "workersets"): {}}), "misspelled spec fields"),
    Case("chainerjob-master", edit(CHAINERJOB, {(*M, "backofLimit"): 1, (*M, "activeDeadline"): 1,
                                                (*M, "mpiConfig", "slot"): 2, (*M, "replicas"): 1}),
         "misspelled master fields; a master has no replicas"),
    Case("chainerjob-worker-sets", edit(CHAINERJOB, {(*WS, "replcias"): 3, (*WS, "mpiconfig"): {"slots": 1},
                                                     ("spec", "workerSets", "ws2"): {"template": {}, "backoffLimit": 1}}),
         "misspelled worker set fields, in two sets"),
    Case("chainerjob-templates", edit(CHAINERJOB, {(*M, "template", "spec", "containers", 0, "imag"): "x",
                                                   (*WS, "template", "metadata", "lables"): {}}),
         "nothing inside the templates"),
    Case("chainerjob-wrong-types", edit(CHAINERJOB, {(*WS, "mpiConfig", "slots"): {"a": 1}, ("spec", "backend"): {"b": 1}}),
         "maps for scalars", ok=False),
    Case("chainerjob-worker-sets-list", edit(CHAINERJOB, {("spec", "workerSets"): [{"replicas": 1}]}),
         "worker sets as a list", ok=False),
    Case("chainerjob-status", edit(CHAINERJOB, {("status", "workerSets", "ws", "ready"): 1,
                                                ("status", "conditions"): [{"type": "Complete", "status": "True", "lastProbe": "x"}]}),
         "ChainerJob status fields"),
    # YAML as kubectl reads it
    Case("null-values", edit(MXJOB, {("spec", "typo"): None, (*RP, "cleanPodPolicy"): None, ("metadata", "annotations"): None,
                                     (*W, "template", "spec", "nodeName"): None}),
         "kubectl apply leaves out every null map entry: nothing to report, nothing stored"),
    Case("duplicate-keys", "\n".join([
        "apiVersion: kubeflow.org/v1", "kind: MXJob", "metadata: {name: fields}", "spec:",
        "  typo: 1", "  typo: 2",
        "  mxReplicaSpecs:", "    Worker:", "      replicas: 1", "      replicas: 2",
        "      template: {spec: {containers: [{name: mxnet, image: x}]}}", ""]),
        "duplicate keys: the last one wins, reported once (the server's duplicate-field check never sees them)"),
    Case("non-string-keys", "\n".join([
        "apiVersion: kubeflow.org/v1", "kind: MXJob", "metadata: {name: fields}", "spec:",
        "  1: a", "  yes: b", "  n: c", "  1.5: d", "  0x1F: e", "  2001-01-01: f", "  1e3: g", "  1.5e-7: h",
        "  mxReplicaSpecs:", "    Worker:", "      template: {spec: {containers: [{name: mxnet, image: x}]}}", ""]),
        "YAML 1.1 keys kubectl turns into strings: 1, true, false, 1.5, 31, the date as written, 1000, 1.5e-07"),
    Case("yaml-scalars", "\n".join([
        "apiVersion: kubeflow.org/v1", "kind: MXJob", "metadata: {name: fields}", "spec:",
        "  mxReplicaSpecs:", "    Worker:", "      replicas: 2.0", "      template:", "        metadata:",
        "          annotations: {date: '2001-01-01'}", "        spec:",
        "          containers: [{name: mxnet, image: x}]",
        "          x: {d: 2001-01-01, t: 2001-12-14t21:59:43.10-05:00, y: y, n: N, e: 1e3, o: 0o17, oct: 017,",
        "              sexagesimal: 190:20:30, f: 1.0, hex: 0x1F, und: 1_000, eight: 08}", ""]),
        "values inside a template as go-yaml v2 reads them (compared in the stored spec)"),
    # Refused by kubectl before anything is sent
    Case("metadata-labels-not-strings", edit(MXJOB, {("metadata", "labels"): {"a": 1}}), "labels are strings", refused=True),
    Case("metadata-finalizers-string", edit(MXJOB, {("metadata", "finalizers"): "x"}), "finalizers are a list", refused=True),
    Case("metadata-bad-time", edit(MXJOB, {("metadata", "creationTimestamp"): "yesterday"}), "an RFC 3339 time",
         refused=True),
    Case("metadata-owner-uid-number", edit(MXJOB, {("metadata", "ownerReferences"): [{**OWNER, "uid": 5}]}),
         "a uid is a string", refused=True),
    Case("null-key", "\n".join([
        "apiVersion: kubeflow.org/v1", "kind: MXJob", "metadata: {name: fields}", "spec:", "  ~: x",
        "  mxReplicaSpecs: {Worker: {template: {}}}", ""]), "a null map key has no JSON form", refused=True),
    Case("infinite-value", "\n".join([
        "apiVersion: kubeflow.org/v1", "kind: MXJob", "metadata: {name: fields}", "spec:", "  x: .inf",
        "  mxReplicaSpecs: {Worker: {template: {}}}", ""]), "JSON has no infinity", refused=True),
]
