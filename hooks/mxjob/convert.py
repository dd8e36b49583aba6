"""Converting a kubeflow.org/v1alpha1 MXJob manifest to kubeflow.org/v1: one document in, one out.

Pure: no I/O. The v1alpha1 shape (the first MXNet operator) lists replicas under
spec.replicaSpecs with an upper-case mxReplicaType, puts the parameter-server port in PsRootPort
and the restart policy in the pod template, and has job-level fields v1 does not. Everything that
has a v1 equivalent is carried; everything else is named in a warning with its field path and
why. Subtrees that are carried whole (metadata, pod templates) are deep copies of the input's
own objects, so a caller that loaded them with comments attached keeps those comments.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from hooks.mxjob.template import MAIN_CONTAINER, PORT_NAME
from hooks.mxjob.vocabulary import KIND, SCHEDULER, SERVER, TRAIN_TYPES

V1ALPHA1 = "kubeflow.org/v1alpha1"
V1 = "kubeflow.org/v1"
SERVED_AS_THEY_ARE = ("kubeflow.org/v1", "kubeflow.org/v1beta1", "kubeflow.org/v1alpha2")

_REPLICA_TYPES = {t.upper(): t for t in TRAIN_TYPES}
_JOB_MODES = ("dist", "local")
_CLEAN_POD_POLICIES = ("All", "Running", "None")
_POD_RESTART_POLICIES = ("Always", "OnFailure", "Never")
_SPEC_FIELDS = ("jobMode", "replicaSpecs", "cleanupPodPolicy", "schedulerName", "terminationPolicy",
                "mxImage", "RuntimeId")
_REPLICA_FIELDS = ("mxReplicaType", "replicas", "PsRootPort", "template")
# Written by the API server: applying a manifest that still has them would fail or mislead.
_SERVER_SET_METADATA = ("uid", "resourceVersion", "generation", "creationTimestamp", "selfLink",
                        "managedFields", "deletionTimestamp", "deletionGracePeriodSeconds")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


@dataclass
class Conversion:
    """The result for one document: the document to write, and what could not be carried."""

    document: Any
    converted: bool = False
    warnings: list[str] = field(default_factory=list)


def convert_document(doc: Any) -> Conversion:
    """Convert one YAML document; anything but a v1alpha1 MXJob is returned unchanged."""
    if not isinstance(doc, Mapping) or doc.get("kind") != KIND:
        return Conversion(doc)
    api_version = doc.get("apiVersion")
    if api_version != V1ALPHA1:
        why = ("the CRD serves it as it is" if api_version in SERVED_AS_THEY_ARE
               else f"only {V1ALPHA1} is converted")
        return Conversion(doc, warnings=[f"apiVersion: {api_version!r} left as it is ({why})"])
    return _Converter(doc).run()


class _Converter:
    def __init__(self, doc: Mapping[str, Any]):
        self.doc = doc
        self.warnings: list[str] = []

    def warn(self, path: str, message: str) -> None:
        self.warnings.append(f"{path}: {message}")

    def run(self) -> Conversion:
        out: dict[str, Any] = {"apiVersion": V1, "kind": KIND,
                               "metadata": self.metadata(self.doc.get("metadata"))}
        spec = self.doc.get("spec")
        if isinstance(spec, Mapping):
            out["spec"] = self.spec(spec)
        else:
            self.warn("spec", "missing or not a map; nothing to convert (v1 needs spec.mxReplicaSpecs)")
        for key in self.doc:
            if key == "status":
                self.warn("status", "not carried: v1alpha1 status has another shape; the operator "
                                    "writes a new one")
            elif key not in ("apiVersion", "kind", "metadata", "spec"):
                self.warn(str(key), "not an MXJob field; not carried")
        return Conversion(out, converted=True, warnings=self.warnings)

    # --- metadata ----------------------------------------------------------------------------

    def metadata(self, meta: Any) -> Any:
        if not isinstance(meta, Mapping):
            self.warn("metadata", "missing or not a map; add metadata.name")
            return {}
        kept: Any = copy.deepcopy(meta)
        for key in _SERVER_SET_METADATA:
            if key in kept:
                del kept[key]
                self.warn(f"metadata.{key}", "not carried: set by the API server for the old object")
        annotations = kept.get("annotations")
        if isinstance(annotations, MutableMapping) and _LAST_APPLIED in annotations:
            del annotations[_LAST_APPLIED]
            self.warn(f"metadata.annotations.{_LAST_APPLIED}",
                      "not carried: kubectl's copy of the v1alpha1 manifest")
            if not annotations:
                del kept["annotations"]
        return kept

    # --- spec --------------------------------------------------------------------------------

    def spec(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        for key in spec:
            if key not in _SPEC_FIELDS:
                self.warn(f"spec.{key}", "not a v1alpha1 field; not carried")
        mode = spec.get("jobMode")
        if mode is not None and mode not in _JOB_MODES:
            self.warn("spec.jobMode", f"{mode!r} is neither dist nor local; converted as MXTrain")
        out: dict[str, Any] = {"jobMode": "MXTrain"}
        out["runPolicy"] = {"cleanPodPolicy": self.clean_pod_policy(spec.get("cleanupPodPolicy"))}
        replicas = self.replica_specs(spec.get("replicaSpecs"), spec.get("schedulerName"))
        out["mxReplicaSpecs"] = replicas
        if mode == "local" and (SCHEDULER in replicas or SERVER in replicas):
            self.warn("spec.jobMode", "local, but the job has a SCHEDULER or SERVER: v1 runs it as a "
                                      "distributed job (remove them for a single-process job)")
        self.termination_policy(spec.get("terminationPolicy"), replicas)
        if "mxImage" in spec:
            self.warn("spec.mxImage", "not carried: v1 has no job-wide default image; every "
                                      "replica's mxnet container names its own image")
        if "RuntimeId" in spec:
            self.warn("spec.RuntimeId", "not carried: v1 names pods and Services "
                                        "<job>-<type>-<index>, without a runtime id")
        return out

    def clean_pod_policy(self, value: Any) -> str:
        # v1alpha1 deleted every pod of a finished job unless told otherwise; v1's default is
        # Running, so the old default is written out to keep the old behaviour.
        if value is None or value == "":
            return "All"
        if value not in _CLEAN_POD_POLICIES:
            self.warn("spec.cleanupPodPolicy", f"{value!r} is not one of All, Running, None; "
                                               "converted as All (what v1alpha1 did)")
            return "All"
        return str(value)

    def termination_policy(self, policy: Any, replicas: Mapping[str, Any]) -> None:
        if policy is None:
            return
        chief = policy.get("chief") if isinstance(policy, Mapping) else None
        if not isinstance(chief, Mapping):
            self.warn("spec.terminationPolicy", "not carried: expected a chief with replicaName "
                                                "and replicaIndex")
            return
        name = str(chief.get("replicaName", "")).upper()
        index = chief.get("replicaIndex", 0)
        # v1 cannot name a chief: the Scheduler decides, or every Worker when there is none.
        # The v1alpha1 default (WORKER 0) and SCHEDULER 0 are what v1 does anyway in practice.
        if (name, index) == ("WORKER", 0) or ((name, index) == ("SCHEDULER", 0) and SCHEDULER in replicas):
            return
        self.warn("spec.terminationPolicy.chief",
                  f"not carried: v1 cannot end a job on {name or '?'} {index}; it succeeds when "
                  "the Scheduler succeeds, or every Worker when there is no Scheduler")

    # --- replicas ----------------------------------------------------------------------------

    def replica_specs(self, items: Any, scheduler_name: Any) -> dict[str, Any]:
        if not isinstance(items, list):
            self.warn("spec.replicaSpecs", "missing or not a list; add at least a WORKER entry")
            return {}
        out: dict[str, Any] = {}
        for i, item in enumerate(items):
            path = f"spec.replicaSpecs[{i}]"
            if not isinstance(item, Mapping):
                self.warn(path, "not a map; not carried")
                continue
            raw_type = item.get("mxReplicaType") or "WORKER"  # v1alpha1's default
            rtype = _REPLICA_TYPES.get(str(raw_type).upper())
            if rtype is None:
                self.warn(f"{path}.mxReplicaType", f"{raw_type!r} is not SCHEDULER, SERVER or WORKER; "
                                                   "this replica spec is not carried")
                continue
            if rtype in out:
                self.warn(path, f"a second {raw_type} entry; v1 has one entry per replica type, so "
                                "it is not carried: merge the two into one")
                continue
            out[rtype] = self.replica(path, item, scheduler_name)
        return out

    def replica(self, path: str, item: Mapping[str, Any], scheduler_name: Any) -> dict[str, Any]:
        for key in item:
            if key not in _REPLICA_FIELDS:
                self.warn(f"{path}.{key}", "not a v1alpha1 replica field; not carried")
        out: dict[str, Any] = {}
        replicas = item.get("replicas")
        if replicas is not None:
            if isinstance(replicas, int) and not isinstance(replicas, bool) and replicas >= 0:
                out["replicas"] = replicas
            else:
                self.warn(f"{path}.replicas", f"{replicas!r} is not a non-negative integer; not "
                                              "carried (v1 defaults to 1)")
        template = item.get("template")
        if not isinstance(template, Mapping):
            self.warn(f"{path}.template", "missing or not a map; add a pod template with a "
                                          f"container named {MAIN_CONTAINER}")
            return out
        template = copy.deepcopy(template)
        pod_spec = template.get("spec")
        if not isinstance(pod_spec, Mapping):
            self.warn(f"{path}.template.spec", "missing or not a map; add the pod spec")
            out["template"] = template
            return out
        policy = self.restart_policy(f"{path}.template.spec.restartPolicy", pod_spec)
        if policy is not None:
            out["restartPolicy"] = policy
        main = self.main_container(f"{path}.template.spec.containers", pod_spec)
        if "PsRootPort" in item:
            self.root_port(f"{path}.PsRootPort", item["PsRootPort"], main)
        if scheduler_name:
            self.scheduler_name(f"{path}.template.spec.schedulerName", pod_spec, scheduler_name)
        out["template"] = template
        return out

    def restart_policy(self, path: str, pod_spec: Any) -> str | None:
        """Move the pod template's restartPolicy to the replica spec, where v1 reads it."""
        if "restartPolicy" not in pod_spec:
            self.warn(path, "not set: v1alpha1 pods got Kubernetes' default Always; v1's default "
                            "Never applies (a failed pod fails the job); set the replica's "
                            "restartPolicy to OnFailure or ExitCode to retry")
            return None
        policy = pod_spec.pop("restartPolicy")
        if policy not in _POD_RESTART_POLICIES:
            self.warn(path, f"{policy!r} is not Always, OnFailure or Never; not carried (v1's "
                            "default Never applies)")
            return None
        if policy == "Always":
            self.warn(path, "Always restarts a pod even after it exits 0, so the job could never "
                            "succeed under v1; carried as it is, but OnFailure is probably meant")
        return str(policy)

    def main_container(self, path: str, pod_spec: Any) -> Any:
        containers = pod_spec.get("containers")
        main = next((c for c in containers or [] if isinstance(c, Mapping)
                     and c.get("name") == MAIN_CONTAINER), None) if isinstance(containers, list) else None
        if main is None:
            self.warn(path, f"no container named {MAIN_CONTAINER}: v1 needs one (rename the "
                            "training container)")
        return main

    def root_port(self, path: str, port: Any, main: Any) -> None:
        """PsRootPort becomes the mxnet container's mxjob-port, the port v1 wires into DMLC_*."""
        if not (isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535):
            self.warn(path, f"{port!r} is not a port number (1 to 65535); not carried")
            return
        if main is None:
            self.warn(path, f"not carried: no container named {MAIN_CONTAINER} to put it on")
            return
        ports = main.get("ports")
        if ports is None:
            ports = main["ports"] = []
        if not isinstance(ports, list):
            self.warn(path, f"not carried: the {MAIN_CONTAINER} container's ports is not a list")
            return
        named: Any = next((p for p in ports if isinstance(p, Mapping) and p.get("name") == PORT_NAME), None)
        if named is not None:
            if named.get("containerPort") != port:
                self.warn(path, f"{port} replaces the {PORT_NAME} port "
                                f"{named.get('containerPort')!r} the container already had")
                named["containerPort"] = port
            return
        same: Any = next((p for p in ports if isinstance(p, Mapping) and p.get("containerPort") == port
                     and not p.get("name")), None)
        if same is not None:
            same["name"] = PORT_NAME
            return
        ports.append({"name": PORT_NAME, "containerPort": port})

    def scheduler_name(self, path: str, pod_spec: Any, name: Any) -> None:
        """v1alpha1's job-wide schedulerName overrode every pod's; v1 reads it from the template."""
        own = pod_spec.get("schedulerName")
        if own is not None and own != name:
            self.warn(path, f"{own!r} replaced by spec.schedulerName {name!r}, as v1alpha1 did")
        pod_spec["schedulerName"] = name
