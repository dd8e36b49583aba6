"""The job's pods, which are not the ChainerJob's children, and what the newest failed master pod showed.

The master is a batch/v1 Job; its pods belong to that Job, so the ChainerJob's sync request never
lists them among its children, and the Job's own status carries no exit code. Metacontroller's
`customize` hook is the way to see them: its answer names, per parent, the objects the sync hook
also wants, and Metacontroller sends them in the sync request's `related` map, keyed like
`children` (`Pod.v1`, then the pod's name), and syncs the parent again when one of them changes
(docs/chainerjob.md, "The master's pods").

`customize_chainerjob` answers the customize hook: the pods with the job's operator name label (the
master's and the workers'), in the job's namespace. It depends on the parent's name alone, as
Metacontroller requires (it keeps one answer per parent uid and generation). `master_failure` reads
the newest failed master pod: its exit code, reason and the line of its message that says what went
wrong, bounded (hooks.shared.termination). `not_scheduled` says which pods the scheduler has not
placed, and why; `lost_pods` which were taken away by a disruption (preempted, evicted);
`queue_evicted` whether Kueue stopped the job's pod group, and in which words (`group_evicted` when
its pods went before a sync saw them stop).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hooks.chainerjob import names
from hooks.chainerjob.spec import DEFAULT_CONTAINER
from hooks.chainerjob.vocabulary import KIND, PARENT_API_VERSION
from hooks.shared.errors import InvalidRequest
from hooks.shared.k8s import JSON, POD_KEY
from hooks.shared.kueue import (
    KUEUE_ATTEMPTS_RELATED,
    KUEUE_POD_GROUP_LABEL,
    QUEUE_LABEL,
    evicted_by_queue,
    eviction_record,
    gated_by_kueue,
    group_eviction,
    kueue_setting,
    pending,
    pod_group_name,
    workload_rule,
)
from hooks.shared.request import read_parent
from hooks.shared.scheduling import held_words, unscheduled
from hooks.shared.status import is_counter
from hooks.shared.termination import (
    MAX_MESSAGE,
    MAX_REASON,
    Said,
    disruption,
    end_of,
    exit_code,
    first_line,
    how_it_ended,
    is_log_tail,
)

FAILURE_KEY = "masterFailure"  # the outcome record's key for what the master pod showed
MAX_NAMED = 3  # pods a waiting message names one by one; more are counted ("and 2 more"), as an MXJob's


def customize_chainerjob(request: Mapping[str, Any], *, kueue_pod_groups: str = "false") -> JSON:
    """The customize hook's answer: every pod of the job, by the operator label the master's and the
    workers' templates share: the master's pods (what a failed one showed) and the workers' (the
    StatefulSet's status does not say why a worker is Pending; its PodScheduled condition does).
    A queued job whose pods form Kueue pod groups (`kueue_pod_groups`, the installation's setting)
    also relates the Workloads of its groups, named after them, from the attempt its status shows
    on (as an MXJob's: hooks.mxjob.sync.customize_mxjob), so it can say why Kueue holds it back.

    No namespace in the rule: with hook version v1 Metacontroller looks for a namespaced parent's
    related objects in the parent's namespace only.
    """
    parent = read_parent(request, api_version=PARENT_API_VERSION, kind=KIND)
    meta = parent["metadata"]
    name = meta["name"]
    rules: list[JSON] = [{"apiVersion": "v1", "resource": "pods",
                          "labelSelector": {"matchLabels": names.common_labels(name)}}]
    labels = meta.get("labels")
    if kueue_setting(kueue_pod_groups) and isinstance(labels, Mapping) and labels.get(QUEUE_LABEL):
        status = parent.get("status")
        attempt = status.get("attempt") if isinstance(status, Mapping) else None
        first = attempt if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0 else 0
        rules.append(workload_rule([pod_group_name(str(name), str(meta.get("uid", "")), n)
                                    for n in range(first, first + KUEUE_ATTEMPTS_RELATED)]))
    return {"relatedResources": rules}


def not_scheduled(job_name: str, worker_pods: list[str], pods: Mapping[str, Any], attempt: int = 0,
                  workloads: Mapping[str, Any] | None = None) -> str:
    """What holds the job's live Pending pods back: `it waits for Kueue: ...` for pods behind Kueue's
    admission gate, with the words of their group's Workload (`workloads`, related by the customize
    hook; hooks.shared.kueue), then `it waits for the scheduler: ...` for pods the scheduler has not
    placed, each with its reason (hooks.shared.scheduling); the master's first, then the workers in
    their order (`worker_pods`); "" when none. Only the pods of `attempt` (a whole-job restart's
    worker pods have the names of the earlier attempt's, which the garbage collector may not have
    marked for deletion yet)."""
    order = {name: i for i, name in enumerate(worker_pods)}
    held: list[tuple[tuple[int, int, str], str, str, str]] = []
    for name, pod in pods.items():
        if not isinstance(pod, Mapping) or not isinstance(name, str):
            continue
        meta, status = _object(pod.get("metadata")), _object(pod.get("status"))
        labels = _object(meta.get("labels"))
        if labels.get(names.NAME_LABEL) != job_name or meta.get("deletionTimestamp") \
                or names.attempt_in(labels) != attempt:
            continue
        if status.get("phase") != "Pending":
            continue
        place = (0 if labels.get(names.ROLE_LABEL) == "master" else 1, order.get(name, len(order)), name)
        queued = _kueue_words(pod, labels, workloads or {})
        why = unscheduled(status)
        if queued:
            held.append((place, "Kueue", name, queued))
        elif why:
            held.append((place, "the scheduler", name, why))
    held.sort()
    said: dict[str, list[str]] = {}
    for who, words in held_words([(who, name, why) for _, who, name, why in held],
                                 {"Kueue": "admitted", "the scheduler": "scheduled"}, MAX_NAMED):
        said.setdefault(who, []).append(words)
    return "; ".join(f"it waits for {who}: {'; '.join(words)}" for who, words in said.items())


def held_by_kueue(job_name: str, pods: Mapping[str, Any], attempt: int = 0) -> bool:
    """Whether a live pod of the job's `attempt` is still behind Kueue's admission gate."""
    for pod in pods.values():
        meta = _object(pod.get("metadata")) if isinstance(pod, Mapping) else {}
        labels = _object(meta.get("labels"))
        if (labels.get(names.NAME_LABEL) == job_name and not meta.get("deletionTimestamp")
                and names.attempt_in(labels) == attempt and gated_by_kueue(_object(pod).get("spec"))):
            return True
    return False


def _kueue_words(pod: Mapping[str, Any], labels: Mapping[str, Any], workloads: Mapping[str, Any]) -> str:
    """Why Kueue holds a pod of a Kueue pod group back (its admission gate on): its group's Workload's
    words, or that its LocalQueue has not admitted it yet; "" when Kueue does not hold it."""
    group, queue = labels.get(KUEUE_POD_GROUP_LABEL), labels.get(QUEUE_LABEL)
    if not (gated_by_kueue(pod.get("spec")) and isinstance(group, str) and isinstance(queue, str)):
        return ""
    said = pending(workloads.get(group))
    if said is None:
        return f"LocalQueue {queue} has not admitted them yet"
    words = f"Workload {group} of LocalQueue {queue} is {said.reason}"
    return f"{words}: {said.message}" if said.message else words


def lost_pods(job_name: str, pods: Mapping[str, Any], attempt: int) -> str:
    """The job's pods of `attempt` that a disruption takes away (their DisruptionTarget condition True:
    kube-scheduler's preemption, the eviction API; hooks.shared.termination.disruption), whether the
    sync sees them going (deletionTimestamp) or stopped (Failed, as the kubelet writes a deleted pod):
    `pod P was lost (no exit code, reason R: 'message')`, by name, the first MAX_NAMED, then how many
    more; "" when none. No exit code: the container shows only the kill, which says nothing of why,
    and so the words stay the same however far the pod got (a fixed point while it goes)."""
    words = []
    for name in sorted(n for n in pods if isinstance(n, str)):
        pod = pods[name]
        if not isinstance(pod, Mapping):
            continue
        meta, status = _object(pod.get("metadata")), _object(pod.get("status"))
        labels = _object(meta.get("labels"))
        if (labels.get(names.NAME_LABEL) != job_name or names.attempt_in(labels) != attempt
                or disruption(status) is None
                or not (meta.get("deletionTimestamp") or status.get("phase") == "Failed")):
            continue
        reason, said = end_of(status, None)
        words.append(f"pod {name} was lost ({how_it_ended(None, reason, said)})")
    more = f"; and {len(words) - MAX_NAMED} more" if len(words) > MAX_NAMED else ""
    return "; ".join(words[:MAX_NAMED]) + more


def queue_evicted(job_name: str, pods: Mapping[str, Any], attempt: int) -> dict[str, str] | None:
    """Kueue's reason and message (hooks.shared.kueue.eviction_record) when Kueue stopped a pod of the
    job's `attempt` (its TerminationTarget condition True, the pod going or Failed: evicted, preempted,
    its Workload deactivated or deleted), else None. Kueue stops the whole group with one reason;
    the master's pod is read first, then the workers' by name, so the words never depend on the order."""
    found: list[tuple[tuple[int, str], dict[str, str]]] = []
    for name, pod in pods.items():
        if not isinstance(pod, Mapping) or not isinstance(name, str):
            continue
        meta, status = _object(pod.get("metadata")), _object(pod.get("status"))
        labels = _object(meta.get("labels"))
        if (labels.get(names.NAME_LABEL) != job_name or names.attempt_in(labels) != attempt
                or evicted_by_queue(status, terminating=bool(meta.get("deletionTimestamp"))) is None):
            continue
        reason, said = end_of(status, None)
        place = (0 if labels.get(names.ROLE_LABEL) == "master" else 1, name)
        found.append((place, eviction_record(reason, said.text if said is not None else None)))
    return min(found, key=lambda item: item[0])[1] if found else None


def group_evicted(job_name: str, uid: str, workloads: Mapping[str, Any], attempt: int,
                  master_job: Mapping[str, Any] | None) -> dict[str, str] | None:
    """Kueue's reason and message when it stopped the `attempt`'s pod group and let its pods go before a
    sync saw them stop (queue_evicted then finds none): the group's Workload says Evicted True
    (hooks.shared.kueue.group_eviction) and the master Job has counted a failed pod, the master's pod
    Kueue stopped. By then the Job and StatefulSet controllers have made other pods in the same group,
    which Kueue's webhook holds at its gate, so only those two say what happened. Kueue evicting a
    group whose pods never ran (still gated) stops nothing: the master Job counts no failure, and the
    group waits to be admitted again as it is. None otherwise."""
    failed = _object(_object(master_job).get("status")).get("failed")
    if not (is_counter(failed) and failed > 0):
        return None
    eviction = group_eviction(workloads.get(pod_group_name(job_name, uid, attempt)))
    return eviction_record(eviction.reason, eviction.message) if eviction is not None else None


def read_related_pods(request: Mapping[str, Any]) -> Mapping[str, Any]:
    """The related pods of a sync request by name; none when there is no `related` (no customize hook)."""
    related = request.get("related")
    if related is None:
        return {}
    if not isinstance(related, Mapping):
        raise InvalidRequest("related: must be an object (kind -> name -> object)")
    pods = related.get(POD_KEY)
    if pods is None:
        return {}
    if not isinstance(pods, Mapping):
        raise InvalidRequest(f"related.{POD_KEY}: must be an object (name -> Pod)")
    return pods


def master_failure(pods: Mapping[str, Any], job_name: str, main_container: str | None,
                   attempt: int = 0) -> JSON | None:
    """What the newest failed master pod of `attempt` showed: `{pod, exitCode, reason, message}` (each
    only when known), or None when no failed master pod is observed. Newest: the latest finish of its
    main container, then the latest creation, then the name, so the same pods always give the same answer.
    `main_container` None (the spec cannot be read): `chainer`, else the pod's first container.

    Only the pods of the master Job's own attempt (a whole-job restart, hooks.chainerjob.restarts)
    count: a new attempt's pod that failed before its container finished (evicted while it started)
    has no finish time, so an earlier attempt's pod, still listed while it goes, would read as newer."""
    wanted = names.master_labels(job_name)
    found: list[tuple[tuple[str, str, str], JSON]] = []
    for name, pod in pods.items():
        if not isinstance(pod, Mapping) or not isinstance(name, str):
            continue
        meta, status, spec = _object(pod.get("metadata")), _object(pod.get("status")), _object(pod.get("spec"))
        labels = _object(meta.get("labels"))
        if (any(labels.get(k) != v for k, v in wanted.items()) or status.get("phase") != "Failed"
                or names.attempt_in(labels) != attempt):
            continue
        container = main_container or _default_container(spec)
        state = _container_state(status, container)
        failure: JSON = {"pod": name}
        code = exit_code(state)
        if code is not None:
            failure["exitCode"] = code
        reason, said = end_of(status, state, log_tail=is_log_tail(_container_spec(spec, container)))
        if reason:
            failure["reason"] = reason
        if said is not None:
            failure["message"] = said.text
            if said.log:
                failure["logLine"] = True  # only the last line of a log tail (hooks.shared.termination)
        terminated = state.get("terminated") if isinstance(state, Mapping) else None
        finished = terminated.get("finishedAt") if isinstance(terminated, Mapping) else None
        created = meta.get("creationTimestamp")
        found.append(((finished if isinstance(finished, str) else "", created if isinstance(created, str) else "",
                       name), failure))
    return max(found, key=lambda item: item[0])[1] if found else None


def recorded_failure(record: Mapping[str, Any]) -> JSON | None:
    """The failure an outcome record kept, only in the shape master_failure writes it."""
    value = record.get(FAILURE_KEY)
    if not isinstance(value, Mapping) or not isinstance(value.get("pod"), str) or not value["pod"]:
        return None
    failure: JSON = {"pod": value["pod"]}
    code = value.get("exitCode")
    if isinstance(code, int) and not isinstance(code, bool):
        failure["exitCode"] = code
    for key, limit in (("reason", MAX_REASON), ("message", MAX_MESSAGE)):
        text = first_line(value.get(key), limit)
        if text is not None:
            failure[key] = text
    if "message" in failure and value.get("logLine") is True:
        failure["logLine"] = True
    return failure


def failure_words(failure: Mapping[str, Any]) -> str:
    """How a Failed condition says it: `the master pod P ended with exit code 1, reason Error: 'text'`
    (hooks.shared.termination.how_it_ended)."""
    message = failure.get("message")
    said = Said(message, failure.get("logLine") is True) if message else None
    ended = how_it_ended(failure.get("exitCode"), failure.get("reason"), said)
    return f"the master pod {failure['pod']} ended with {ended}"


def _object(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _default_container(spec: Mapping[str, Any]) -> str | None:
    listed = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    return DEFAULT_CONTAINER if DEFAULT_CONTAINER in listed else next(iter(listed), None)


def _container_spec(spec: Mapping[str, Any], name: str | None) -> Mapping[str, Any] | None:
    for container in spec.get("containers") or []:
        if isinstance(container, Mapping) and container.get("name") == name:
            return container
    return None


def _container_state(status: Mapping[str, Any], main_container: str | None) -> Any:
    for cs in status.get("containerStatuses") or []:
        if isinstance(cs, Mapping) and cs.get("name") == main_container:
            return cs.get("state")
    return None
