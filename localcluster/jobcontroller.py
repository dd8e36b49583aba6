"""The Job controller stand-in (batch/v1 Job), for ChainerJob's master: what kube-controller-manager does.

Emulated: one pod at a time (parallelism and completions 1, the only shape the operators create),
pods named `<job>-<5 random chars>` with the Job's labels, a scaled-down exponential delay before
replacing a failed pod, `backoffLimit` (failed pods beyond it; under OnFailure, container restarts
of the active pods reaching it, counted apart, as pastBackoffLimitOnFailure does) ending in
BackoffLimitExceeded, `activeDeadlineSeconds` from startTime ending in DeadlineExceeded, success
once a pod succeeds, and status active/ready/succeeded/failed/startTime/completionTime. As recent
Kubernetes (delayTerminalCondition): the decided outcome is posted first as the interim condition
SuccessCriteriaMet or FailureTarget, active pods are deleted, and Complete or Failed follows only
once no pod is left running or terminating. Not emulated: parallelism/completions above 1, indexed
Jobs, suspend, pod failure policies, ttlSecondsAfterFinished, status.terminating.
"""

from __future__ import annotations

import copy
import secrets
import time
from datetime import UTC, datetime
from typing import Any, cast

from .reconciler import Key, Reconciler
from .store import Store, StoreError, controller_reference, now_rfc3339
from .types import KubeObject

DEFAULT_BACKOFF_LIMIT = 6
# The interim condition a recent Job posts when its outcome is decided, and the final one it posts once its pods are gone.
INTERIM = {"SuccessCriteriaMet": "Complete", "FailureTarget": "Failed"}
FINAL = tuple(INTERIM.values())
# Kubernetes waits 10 s doubling to 6 min before replacing a failed pod; scaled down like the kubelet's.
POD_BACKOFF = (0.5, 4.0)
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what the API server's generateName draws from


def generated_name(prefix: str) -> str:
    """`<prefix><5 random chars>`, as the API server completes a generateName."""
    return prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(5))


def _seconds_since(timestamp: str) -> float:
    started = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return (datetime.now(UTC) - started).total_seconds()


def _past_backoff_limit_on_failure(spec: dict[str, Any], active: list[KubeObject]) -> bool:
    """job_controller.go pastBackoffLimitOnFailure: under OnFailure, the container restarts of the running and
    pending pods reach backoffLimit (any restart when the limit is 0); failed pods are counted separately."""
    if spec.get("template", {}).get("spec", {}).get("restartPolicy") != "OnFailure":
        return False
    restarts: int = sum(cs.get("restartCount", 0) for p in active if p.get("status", {}).get("phase") in ("Running", "Pending")
                   for cs in p.get("status", {}).get("initContainerStatuses", []) + p.get("status", {}).get("containerStatuses", []))
    limit: int = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    return restarts > 0 if limit == 0 else restarts >= limit


def _condition(type_: str, reason: str, message: str) -> dict[str, str]:
    now = now_rfc3339()
    return {"type": type_, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message}


class JobController(Reconciler):
    """Runs batch/v1 Jobs: creates their pods and reports their status."""

    api_version, kind = "batch/v1", "Job"

    def __init__(self, store: Store):
        super().__init__(store)
        # Pods counted as failed or succeeded, per Job uid (the real controller tracks them with finalizers),
        # and when the last failure was counted (the replacement's backoff runs from then).
        self._counted: dict[str, dict[str, str]] = {}
        self._last_failure: dict[str, float] = {}

    def forget(self, obj: KubeObject) -> None:
        self._counted.pop(obj["metadata"]["uid"], None)
        self._last_failure.pop(obj["metadata"]["uid"], None)

    def reconcile(self, key: Key) -> float | None:  # noqa: C901 (23)
        job = self.store.get(self.api_version, self.kind, *key)
        if job is None or job["metadata"].get("deletionTimestamp"):
            return None
        spec, status = job.get("spec", {}), copy.deepcopy(job.get("status", {}))
        pods = self.owned_pods(job)
        counted = self._counted.setdefault(job["metadata"]["uid"], {})
        for pod in pods:
            phase = pod.get("status", {}).get("phase")
            if phase in ("Succeeded", "Failed") and pod["metadata"]["uid"] not in counted:
                counted[pod["metadata"]["uid"]] = phase
                if phase == "Failed":
                    self._last_failure[job["metadata"]["uid"]] = time.monotonic()
        active = [p for p in pods if p["metadata"]["uid"] not in counted and not self.terminating(p)]
        succeeded = sum(1 for phase in counted.values() if phase == "Succeeded")
        failed = sum(1 for phase in counted.values() if phase == "Failed")
        conditions = status.setdefault("conditions", [])
        final = any(c.get("type") in FINAL and c.get("status") == "True" for c in conditions)
        target = next((c for c in conditions if c.get("type") in INTERIM and c.get("status") == "True"), None)
        status.setdefault("startTime", now_rfc3339())
        again: float | None = None
        decided_now = False
        if not final and target is None:
            deadline = spec.get("activeDeadlineSeconds")
            if succeeded >= 1:
                target = _condition("SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
            elif failed > spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT) or _past_backoff_limit_on_failure(spec, active):
                target = _condition("FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            elif deadline is not None and _seconds_since(status["startTime"]) >= deadline:
                target = _condition("FailureTarget", "DeadlineExceeded", "Job was active longer than specified deadline")
            else:
                if deadline is not None:
                    again = max(0.05, deadline - _seconds_since(status["startTime"]))
                if not active and not any(self.terminating(p) for p in pods):
                    delay = min(POD_BACKOFF[1], POD_BACKOFF[0] * 2 ** (failed - 1)) if failed else 0.0
                    last_failure = self._last_failure.get(job["metadata"]["uid"])
                    wait = delay - (time.monotonic() - last_failure) if last_failure is not None else 0.0
                    if wait > 0:
                        again = min(again or wait, wait)
                    else:
                        active.append(self._create_pod(job))
            if target is not None:
                conditions.append(target)
                decided_now = True
        if target is not None and not final:
            # The outcome is decided: active pods go; Complete/Failed only once no pod is left running or terminating.
            for pod in active:
                try:
                    self.store.delete("v1", "Pod", *key[:1], pod["metadata"]["name"])
                except StoreError:
                    pass
            active = []
            remaining = [p for p in self.owned_pods(job) if self.terminating(p) or p["metadata"]["uid"] not in counted]
            if decided_now or remaining:
                again = 0.0 if decided_now else None  # the pods' removal wakes us; a fresh decision is written first
            else:
                now = now_rfc3339()
                conditions.append({**target, "type": INTERIM[target["type"]], "lastProbeTime": now, "lastTransitionTime": now})
                if target["type"] == "SuccessCriteriaMet":
                    status["completionTime"] = now
        if final:
            active = []
        if not conditions:
            del status["conditions"]
        status["active"] = len(active)
        status["ready"] = sum(1 for p in active if self.ready(p))
        status["succeeded"], status["failed"] = succeeded, failed
        for field in ("active", "succeeded", "failed"):
            if not status[field]:
                del status[field]  # omitempty in the Go type
        try:
            self.store.update_status(self.api_version, self.kind, *key, status)
        except StoreError:
            return None
        return again

    def _create_pod(self, job: KubeObject) -> KubeObject:
        template = copy.deepcopy(job.get("spec", {}).get("template", {}))
        meta = template.get("metadata", {})
        uid, name = job["metadata"]["uid"], job["metadata"]["name"]
        labels = {**meta.get("labels", {}), "batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                  "controller-uid": uid, "job-name": name}
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": generated_name(f"{name}-"), "namespace": job["metadata"]["namespace"], "labels": labels,
                         "annotations": dict(meta.get("annotations", {})), "ownerReferences": [controller_reference(job)]},
            "spec": template.get("spec", {}),
        }
        for _ in range(5):
            try:
                return self.store.create(cast(KubeObject, pod))
            except StoreError as err:
                if err.code != 409:
                    raise
                pod["metadata"]["name"] = generated_name(f"{name}-")
        raise StoreError(409, "AlreadyExists", f"no free pod name for Job {name}")
