"""Builders of a ChainerJob's desired children: one function per object, fresh dicts of the fields we own."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.chainerjob import launch, names, progress
from hooks.chainerjob.names import ASSETS_VOLUME, KUBECTL_INIT_CONTAINER, KUBECTL_VOLUME
from hooks.chainerjob.spec import ChainerJob, WorkerSet
from hooks.shared.canonical import pod_template_spec
from hooks.shared.errors import SpecError
from hooks.shared.gang import Gang, SchedulingPolicy, mark_pod, min_resources, podgroup_for
from hooks.shared.jsoncopy import json_copy
from hooks.shared.k8s import JSON
from hooks.shared.kueue import PRIORITY_CLASS_LABEL, QUEUE_LABEL, group_marks, pod_group_name
from hooks.shared.termination import with_log_fallback
from hooks.shared.validation import MAX_INT32

# The default kubectl image (the hooks setting CHAINERJOB_KUBECTL_IMAGE overrides it): Kubernetes'
# own kubectl image, built on debian-base with coreutils, so `cp` is there; kubectl is /bin/kubectl.
KUBECTL_IMAGE = "registry.k8s.io/kubectl:v1.34.1"
KUBECTL_IN_IMAGE = "/bin/kubectl"

MASTER_TASK = "master"  # Volcano's task name of the master pod; worker pods use their worker set's
AGENT_MODE = 0o555
HOSTFILE_MODE = 0o444


def service_account_for(job: ChainerJob) -> JSON:
    """The master pod's ServiceAccount."""
    return {"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": _meta(job, names.service_account(job.name), names.common_labels(job.name))}


def role_for(job: ChainerJob) -> JSON:
    """What the master may do: exec into its own workers, read their pods and StatefulSets.

    A rule with an empty resourceNames list would cover every pod in the namespace, so with no
    worker pods at all the pod rules are left out instead.
    """
    pods = sorted(names.worker_pods(job.name, {n: ws.replicas for n, ws in job.worker_sets.items()}))
    rules: list[JSON] = []
    if pods:
        rules.append({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"],
                      "resourceNames": pods})
        # get: kubectl >= 1.30 execs over WebSockets (an HTTP GET); create: older kubectl (a POST),
        # and what clusters with the WebSocket create check ask for.
        rules.append({"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"],
                      "resourceNames": pods})
    statefulsets = sorted(names.worker_set(job.name, w) for w in job.worker_sets)
    if statefulsets:
        rules.append({"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get"],
                      "resourceNames": statefulsets})
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": _meta(job, names.role(job.name), names.common_labels(job.name)), "rules": rules}


def role_binding_for(job: ChainerJob) -> JSON:
    """Grants the Role to the master's ServiceAccount."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": _meta(job, names.role_binding(job.name), names.common_labels(job.name)),
            "subjects": [{"kind": "ServiceAccount", "name": names.service_account(job.name),
                          "namespace": job.namespace}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": names.role(job.name)}}


def assets_for(job: ChainerJob, *, gang: Gang | None = None, queued: bool = False) -> JSON:
    """The ConfigMap with the rsh agent, the master's launcher and the complete hostfile. Under a
    gang or a Kueue pod group (`queued`) the master starts with its workers, so the agent waits for them."""
    agent = launch.agent_script(job, wait_for_target=gang is not None or queued)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": _meta(job, names.assets(job.name), names.common_labels(job.name)),
            "data": {names.AGENT_KEY: agent, names.HOSTFILE_KEY: launch.hostfile(job),
                     names.LAUNCHER_KEY: launch.launcher_script(job)}}


def service_for(job: ChainerJob, ws: WorkerSet) -> JSON:
    """A worker set's governing headless Service: stable DNS names for its pods."""
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _meta(job, names.worker_set(job.name, ws.name), names.worker_labels(job.name, ws.name)),
            "spec": {"clusterIP": "None",
                     # MPI wires up while pods come and go; names must resolve before Ready.
                     "publishNotReadyAddresses": True,
                     "selector": names.worker_labels(job.name, ws.name)}}


# A StatefulSet created before OnDelete has RollingUpdate with a `rollingUpdate` the API server
# defaulted; the merge cannot remove that field (it was never in the last-applied copy), and the
# API refuses OnDelete beside it. So such a StatefulSet keeps RollingUpdate with a partition no
# ordinal reaches, which updates no pod either (pods whose ordinal is at least the partition roll).
FROZEN_ROLLING_UPDATE: JSON = {"type": "RollingUpdate", "rollingUpdate": {"partition": MAX_INT32}}


def statefulset_for(job: ChainerJob, ws: WorkerSet, *, done: bool, gang: Gang | None = None,
                    observed: Mapping[str, Any] | None = None, attempt: int = 0, queued: bool = False) -> JSON:
    """A worker set's StatefulSet: all pods at once, scaled to 0 once the master has finished.

    OnDelete: a template edit, or a gang enabled on a live install (which marks every template),
    must never roll running workers (mpiexec would lose a rank); a pod created later (a replaced
    worker) takes the template as it is then. `observed` is the StatefulSet as it exists, if it does.
    InPlace: the user's template is spelt as the API server stores it (quantities, empty values),
    or Metacontroller would update the StatefulSet on every sync. `attempt`: the whole-job restart
    it belongs to (hooks.chainerjob.restarts), labelled outside the selector.
    """
    labels = names.worker_labels(job.name, ws.name)
    pod_spec = pod_template_spec(ws.template.get("spec") or {})
    pod_spec["volumes"] = [*(pod_spec.get("volumes") or []), _assets_volume(job)]
    _decorate_containers(pod_spec, [_assets_mount()])
    progress.wire(job, pod_spec, master=False)
    _log_fallback(pod_spec, ws.main_container)
    template_meta = _template_meta(ws.template, labels)
    if gang is not None:
        mark_pod(gang, template_meta, pod_spec, group=job.name, task=ws.name, priority_class=None)
    _mark_attempt(template_meta, pod_spec, attempt)
    if queued:
        _mark_kueue_group(job, template_meta, attempt)
    return {"apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": _meta(job, names.worker_set(job.name, ws.name),
                              {**_owner_labels(job, queued), **labels, **_attempt_label(attempt)}),
            "spec": {"replicas": 0 if done else ws.replicas,
                     "podManagementPolicy": "Parallel",
                     "updateStrategy": _update_strategy(observed),
                     "serviceName": names.worker_set(job.name, ws.name),
                     "selector": {"matchLabels": labels},
                     "template": {"metadata": template_meta, "spec": pod_spec}}}


def _update_strategy(observed: Mapping[str, Any] | None) -> JSON:
    spec = observed.get("spec") if observed is not None else None
    strategy = spec.get("updateStrategy") if isinstance(spec, Mapping) else None
    if isinstance(strategy, Mapping) and strategy.get("type") == "RollingUpdate":
        frozen: JSON = json_copy(FROZEN_ROLLING_UPDATE)
        return frozen
    return {"type": "OnDelete"}


def master_job_for(job: ChainerJob, *, kubectl_image: str, gang: Gang | None = None, attempt: int = 0,
                   queued: bool = False) -> JSON:
    """The master Job; with worker sets, its pod gets kubectl, the agent and the hostfile; labelled
    with its attempt from the first whole-job restart on (hooks.chainerjob.restarts)."""
    labels = names.master_labels(job.name)
    pod_spec = json_copy(dict(job.master.template.get("spec") or {}))
    if job.distributed:
        pod_spec["serviceAccountName"] = names.service_account(job.name)
        pod_spec["hostname"] = names.master(job.name)
        pod_spec["volumes"] = [*(pod_spec.get("volumes") or []),
                               {"name": KUBECTL_VOLUME, "emptyDir": {}}, _assets_volume(job, master=True)]
        mounts = [{"name": KUBECTL_VOLUME, "mountPath": names.KUBECTL_DIR}, _assets_mount()]
        _decorate_containers(pod_spec, mounts)
        _through_launcher(pod_spec, job.master.main_container)
        pod_spec.setdefault("initContainers", []).append({
            "name": KUBECTL_INIT_CONTAINER,
            "image": kubectl_image,
            "command": ["cp", KUBECTL_IN_IMAGE, f"{names.KUBECTL_DIR}/kubectl"],
            "volumeMounts": [{"name": KUBECTL_VOLUME, "mountPath": names.KUBECTL_DIR}],
        })
    progress.wire(job, pod_spec, master=True)
    _log_fallback(pod_spec, job.master.main_container)
    spec: JSON = {"parallelism": 1, "completions": 1}
    if job.master.backoff_limit is not None:
        spec["backoffLimit"] = job.master.backoff_limit
    if job.master.active_deadline_seconds is not None:
        spec["activeDeadlineSeconds"] = job.master.active_deadline_seconds
    template_meta = _template_meta(job.master.template, labels)
    if gang is not None:
        mark_pod(gang, template_meta, pod_spec, group=job.name, task=MASTER_TASK, priority_class=None)
    _mark_attempt(template_meta, pod_spec, attempt)
    if queued:
        _mark_kueue_group(job, template_meta, attempt)
    spec["template"] = {"metadata": template_meta, "spec": pod_spec}
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": _meta(job, names.master(job.name),
                              {**_owner_labels(job, queued), **labels, **_attempt_label(attempt)}),
            "spec": spec}


def _mark_kueue_group(job: ChainerJob, template_meta: JSON, attempt: int) -> None:
    """A queued job's pods (docs/ecosystem.md, "Kueue"): the master's and every worker's form one
    Kueue plain-pod group per attempt, so Kueue admits the whole job or nothing (MPI needs every
    rank); the job's WorkloadPriorityClass label goes with them."""
    labels, annotations = group_marks(job.queue, pod_group_name(job.name, job.uid, attempt), 1 + job.workers)
    if PRIORITY_CLASS_LABEL in job.labels:
        labels[PRIORITY_CLASS_LABEL] = job.labels[PRIORITY_CLASS_LABEL]
    template_meta["labels"] = {**template_meta["labels"], **labels}
    template_meta["annotations"] = {**(template_meta.get("annotations") or {}), **annotations}


def _owner_labels(job: ChainerJob, queued: bool) -> dict[str, str]:
    """The job's labels on its master Job and StatefulSets; a queued job's without Kueue's: with
    Kueue's batch/job or statefulset integration on, Kueue would queue that one child on its own."""
    if not queued:
        return dict(job.labels)
    return {k: v for k, v in job.labels.items() if k not in (QUEUE_LABEL, PRIORITY_CLASS_LABEL)}


def _attempt_label(attempt: int) -> dict[str, str]:
    # Attempt 0 is unlabelled, so a job that never restarts is answered as before.
    return {names.ATTEMPT_LABEL: str(attempt)} if attempt else {}


def _mark_attempt(template_meta: JSON, pod_spec: JSON, attempt: int) -> None:
    """A restarted attempt's pods: its label, and MXJOB_ATTEMPT for the progress helper's reports."""
    if not attempt:
        return
    template_meta["labels"] = {**template_meta["labels"], **_attempt_label(attempt)}
    entry = {"name": names.ATTEMPT_ENV, "value": str(attempt)}

    def others(env: Any) -> list[Any]:
        return [e for e in env or [] if not (isinstance(e, dict) and e.get("name") == names.ATTEMPT_ENV)]
    pod_spec["containers"] = [{**c, "env": [*others(c.get("env")), entry]} for c in pod_spec["containers"]]


def podgroup_for_job(job: ChainerJob, gang: Gang) -> JSON:
    """The job's PodGroup: the master and every worker start together.

    ChainerJob's API has no schedulingPolicy, so only minMember (every pod) and the resources of
    those pods are set. Raises SpecError when a template's resources cannot be read.
    """
    members = [("spec.master.template.spec", job.master.template.get("spec") or {}, 1)]
    members += [(f"spec.workerSets.{ws.name}.template.spec", ws.template.get("spec") or {}, ws.replicas)
                for ws in job.worker_sets.values()]
    problems: list[str] = []
    resources = min_resources(members, 1 + job.workers, problems)
    if problems:
        raise SpecError(problems)
    return podgroup_for(gang, name=job.name, namespace=job.namespace, labels=names.common_labels(job.name),
                        min_member=1 + job.workers, policy=SchedulingPolicy(), resources=resources)


def _meta(job: ChainerJob, name: str, labels: Mapping[str, str]) -> JSON:
    return {"name": name, "namespace": job.namespace, "labels": dict(labels)}


def _template_meta(template: Mapping[str, Any], labels: Mapping[str, str]) -> JSON:
    """The pod template's metadata: the user's labels and annotations, operator labels winning."""
    meta = template.get("metadata") or {}
    out: JSON = {"labels": {**(meta.get("labels") or {}), **labels}}
    if meta.get("annotations"):
        out["annotations"] = dict(meta["annotations"])
    return out


def _assets_volume(job: ChainerJob, *, master: bool = False) -> JSON:
    # Items with their own modes: the agent must be executable wherever the image's user is. The
    # launcher only in the master's (a worker's template stays as it was before the launcher).
    launcher = [{"key": names.LAUNCHER_KEY, "path": names.LAUNCHER_KEY, "mode": AGENT_MODE}] if master else []
    return {"name": ASSETS_VOLUME, "configMap": {"name": names.assets(job.name), "items": [
        {"key": names.HOSTFILE_KEY, "path": names.HOSTFILE_KEY, "mode": HOSTFILE_MODE},
        {"key": names.AGENT_KEY, "path": names.AGENT_KEY, "mode": AGENT_MODE},
        *launcher,
    ]}}


def _assets_mount() -> JSON:
    return {"name": ASSETS_VOLUME, "mountPath": names.ASSETS_DIR, "readOnly": True}


def _through_launcher(pod_spec: JSON, main: str) -> None:
    """The master's main container runs its command through the launcher, so that a worker lost
    while mpiexec ran fails it (hooks.chainerjob.launch, launcher_script). A container without a
    `command` runs its image's entrypoint, which the hook cannot know: it is left as it is."""
    pod_spec["containers"] = [
        {**c, "command": [launch.LAUNCHER_PATH, *c["command"]]}
        if c.get("name") == main and isinstance(c.get("command"), list) and c["command"] else c
        for c in pod_spec["containers"]]


def _log_fallback(pod_spec: JSON, main: str) -> None:
    """The main container's log tail is its termination message when it fails without writing one,
    so a Failed job still says why after its pods are gone (the user's own policy is kept)."""
    pod_spec["containers"] = [with_log_fallback(c) if c.get("name") == main else c for c in pod_spec["containers"]]


def _decorate_containers(pod_spec: JSON, mounts: list[JSON]) -> None:
    """The operator's mounts on every container (init containers too), its env on the regular ones."""
    # No empty list where the user had none: the API server drops it, and the difference would
    # make every InPlace apply an update.
    if pod_spec.get("initContainers"):
        pod_spec["initContainers"] = [
            {**c, "volumeMounts": [*(c.get("volumeMounts") or []), *json_copy(mounts)]}
            for c in pod_spec["initContainers"]]
    pod_spec["containers"] = [
        {**c, "env": launch.with_launcher_env(c.get("env")),
         "volumeMounts": [*(c.get("volumeMounts") or []), *json_copy(mounts)]}
        for c in pod_spec["containers"]]

