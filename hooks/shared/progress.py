"""Progress reporting and stall detection, shared by the job kinds (docs/progress.md).

A job that asks for it (`runPolicy.progress`, or `runPolicy.stallPolicy`) gets four children: a
ConfigMap `<job>-progress` its reporting processes patch, and a ServiceAccount, Role and
RoleBinding of the same name that let its pods do that and nothing else. Each reporter writes one
data key (its name, e.g. `worker-0`) holding compact JSON: `{"attempt", "step", "total",
"metrics", "time"}`. The hook never writes that data (the ConfigMap child is answered without
data, and its rule is OnDelete), so hook and reporters never fight over it.

The hook reads the reports into `status.progress`, in the shape of Kubeflow Trainer's
`trainerStatus` where it fits (progressPercentage, metrics as name/value strings,
lastUpdatedTime). Everything here is a pure function of the observed ConfigMap, the old status
and the time passed in: the report times come from the reports, never from now, so the same
observations give the same bytes. A report is taken as the newer of the ConfigMap's and the
status's copy, so a stale read of either cannot move a reporter's last report back (and so cannot
make a stall that did not happen).
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NamedTuple, get_args

from hooks.shared.conditions import rfc3339
from hooks.shared.k8s import JSON
from hooks.shared.messages import show
from hooks.shared.status import parse_time, plus_seconds
from hooks.shared.validation import MAX_INT32, is_non_negative_int

StallAction = Literal["Report", "RestartJob", "FailJob"]
STALL_ACTIONS: tuple[StallAction, ...] = get_args(StallAction)
Reporters = Literal["FirstReplica", "AllReplicas"]
REPORTERS: tuple[Reporters, ...] = get_args(Reporters)

CONFIG_MAP_ENV = "MXJOB_PROGRESS_CONFIGMAP"
NAMESPACE_ENV = "MXJOB_PROGRESS_NAMESPACE"
REPORTER_ENV = "MXJOB_PROGRESS_REPORTER"
# Which MPI ranks report, for a kind whose training processes are MPI ranks (ChainerJob): "0" or
# "all"; the helper then names its reporter `rank-<N>` from the rank MPI gives it.
MPI_RANKS_ENV = "MXJOB_PROGRESS_MPI_RANKS"
PROGRESS_ENV_NAMES = frozenset({CONFIG_MAP_ENV, NAMESPACE_ENV, REPORTER_ENV, MPI_RANKS_ENV})
# The child rules of the reporting children besides ConfigMaps (metacontroller/compositecontroller.yaml).
ACCESS_KEYS = ("ServiceAccount.v1", "Role.rbac.authorization.k8s.io/v1", "RoleBinding.rbac.authorization.k8s.io/v1")

MAX_METRICS = 16  # per report, the first by name; a status stays small whatever a job sends
MAX_METRIC_NAME = 63
MAX_METRIC_VALUE = 64
MAX_REPORTERS = 64  # reporters shown in status, by name
MAX_STEP = 2**53  # an exact integer in every JSON reader


@dataclass(frozen=True)
class StallPolicy:
    """runPolicy.stallPolicy: how long a running job may go without a report, and what then."""

    timeout_seconds: int
    action: StallAction = "Report"


@dataclass(frozen=True)
class ProgressPolicy:
    """runPolicy.progress and runPolicy.stallPolicy, parsed. Off unless the job asks."""

    enabled: bool = False
    reporters: Reporters = "FirstReplica"
    stall: StallPolicy | None = None


NO_PROGRESS = ProgressPolicy()


def parse_progress_policy(run_policy: Mapping[str, Any], problems: list[str],
                          path: str = "spec.runPolicy", unsupported: Mapping[str, str] | None = None) -> ProgressPolicy:
    """runPolicy.progress ({} or {reporters}) and runPolicy.stallPolicy; a stallPolicy turns reporting on.
    `unsupported`: stall actions the kind cannot take, each with why."""
    raw = run_policy.get("progress")
    reporters: Reporters = "FirstReplica"
    if raw is not None:
        if not isinstance(raw, Mapping):
            problems.append(f"{path}.progress: must be an object ({{}} turns reporting on)")
            raw = {}
        value = raw.get("reporters")
        if value is not None:
            chosen = next((r for r in REPORTERS if r == value), None)
            if chosen is None:
                problems.append(f"{path}.progress.reporters: {show(value)} is not one of {', '.join(REPORTERS)}")
            else:
                reporters = chosen
    stall = _parse_stall_policy(run_policy.get("stallPolicy"), problems, f"{path}.stallPolicy", unsupported or {})
    enabled = raw is not None or run_policy.get("stallPolicy") is not None
    return ProgressPolicy(enabled=enabled, reporters=reporters, stall=stall)


def _parse_stall_policy(raw: Any, problems: list[str], path: str, unsupported: Mapping[str, str]) -> StallPolicy | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object with timeoutSeconds and action")
        return None
    raw_timeout = raw.get("timeoutSeconds")
    timeout = raw_timeout if is_non_negative_int(raw_timeout, MAX_INT32) and raw_timeout >= 1 else None
    if raw_timeout is None:
        problems.append(f"{path}.timeoutSeconds: required, the seconds a running job may go without a report")
    elif timeout is None:
        problems.append(f"{path}.timeoutSeconds: must be an integer from 1 to {MAX_INT32}, got {show(raw_timeout)}")
    ok = timeout is not None
    action: StallAction = "Report"
    if raw.get("action") is not None:
        chosen = next((a for a in STALL_ACTIONS if a == raw["action"]), None)
        allowed = [a for a in STALL_ACTIONS if a not in unsupported]
        if chosen is None:
            problems.append(f"{path}.action: {show(raw['action'])} is not one of {', '.join(allowed)}")
            ok = False
        elif chosen in unsupported:
            problems.append(f"{path}.action: {chosen} is not supported: {unsupported[chosen]}; "
                            f"use {' or '.join(allowed)}")
            ok = False
        else:
            action = chosen
    return StallPolicy(timeout, action) if ok and timeout is not None else None


# --- children ----------------------------------------------------------------------------------

def progress_name(job_name: str) -> str:
    """The name of the progress ConfigMap and of the ServiceAccount, Role and RoleBinding with it."""
    return f"{job_name}-progress"


def progress_children(job_name: str, namespace: str, labels: Mapping[str, str],
                      also_bound: Iterable[str] = ()) -> list[JSON]:
    """The four reporting children. The ConfigMap carries no data: the reporters write it, and
    the hook must never answer a value they would have to fight (so an InPlace rule never touches
    it either: Metacontroller's merge removes only what an earlier answer had). `also_bound`: other
    ServiceAccounts of the job whose pods report (a ChainerJob's launcher)."""
    name = progress_name(job_name)

    def meta() -> JSON:
        return {"name": name, "namespace": namespace, "labels": dict(labels)}

    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta()},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(),
         # Read and patch that one ConfigMap: a pod of the job can touch nothing else.
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [name],
                    "verbs": ["get", "patch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta(),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}
                      for account in (name, *also_bound)]},
    ]


def uses_own_account(template_spec: Mapping[str, Any]) -> bool:
    """Whether a pod template names its own ServiceAccount (then the user grants it get and patch
    on the progress ConfigMap: docs/progress.md)."""
    return bool(template_spec.get("serviceAccountName") or template_spec.get("serviceAccount"))


def wire_pod(pod: JSON, job_name: str, namespace: str, reporter: str | None) -> JSON:
    """A freshly built desired pod, pointed at the progress ConfigMap: the env every container
    gets (REPORTER only on a pod that reports), and the job's ServiceAccount unless the template
    names its own. Changes `pod` (a new object the builder just made) and returns it."""
    wire_pod_spec(pod["spec"], job_name, namespace, [] if reporter is None else [(REPORTER_ENV, reporter)])
    return pod


def wire_pod_spec(spec: JSON, job_name: str, namespace: str, extra: Iterable[tuple[str, str]] = (),
                  account: bool = True) -> None:
    """Point a freshly built pod spec (a pod's, or a pod template's) at the progress ConfigMap: the
    env every container gets, then `extra` (name, value) entries, replacing user entries of those
    names; and, when `account`, the job's ServiceAccount unless the spec names its own."""
    name = progress_name(job_name)
    entries: list[JSON] = [{"name": CONFIG_MAP_ENV, "value": name}, {"name": NAMESPACE_ENV, "value": namespace},
                           *({"name": key, "value": value} for key, value in extra)]
    for container in spec.get("containers") or []:
        kept = [e for e in container.get("env") or []
                if not (isinstance(e, Mapping) and e.get("name") in PROGRESS_ENV_NAMES)]
        container["env"] = kept + [dict(e) for e in entries]
    if account and not uses_own_account(spec):
        spec["serviceAccountName"] = name


def reporter_name(rtype: str, index: int) -> str:
    """A reporter's data key: `worker-0`."""
    return f"{rtype.lower()}-{index}"


def reports_from(policy: ProgressPolicy, index: int) -> bool:
    """Whether the pod of this index reports: index 0 of each type, or all under AllReplicas."""
    return policy.reporters == "AllReplicas" or index == 0


# --- reports -----------------------------------------------------------------------------------

class Report(NamedTuple):
    """One reporter's last report, in the form status keeps it."""

    attempt: int
    time: str  # RFC 3339, seconds, as rfc3339 writes it
    step: int | None = None
    total: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()

    @property
    def moment(self) -> datetime:
        moment = parse_time(self.time)
        assert moment is not None  # read_report keeps only reports with a readable time
        return moment

    @property
    def percent(self) -> int | None:
        if self.step is None or not self.total:
            return None
        return max(0, min(100, math.floor(self.step * 100 / self.total)))


def read_report(raw: Any) -> Report | None:
    """A report as a reporter wrote it (a JSON string) or as status keeps it (an object); None
    when it has no readable time. Fields of the wrong type are left out, never fatal."""
    if isinstance(raw, str):
        if len(raw) > 16384:
            return None
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, Mapping):
        return None
    moment = parse_time(raw.get("time", raw.get("lastUpdatedTime")))
    if moment is None:
        return None
    attempt = raw.get("attempt", 0)
    step, total = _count(raw.get("step")), _count(raw.get("total"))
    return Report(attempt=attempt if is_non_negative_int(attempt, MAX_INT32) else 0, time=rfc3339(moment),
                  step=step, total=total if total else None, metrics=_metrics(raw.get("metrics")))


def _count(value: Any) -> int | None:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if is_non_negative_int(value, MAX_STEP) else None


def _metrics(raw: Any) -> tuple[tuple[str, str], ...]:
    """{name: value} from a reporter, or [{name, value}] from status: name-sorted string pairs."""
    if isinstance(raw, list):
        raw = {m.get("name"): m.get("value") for m in raw if isinstance(m, Mapping)}
    if not isinstance(raw, Mapping):
        return ()
    pairs = []
    for name, value in raw.items():
        if not (isinstance(name, str) and 0 < len(name) <= MAX_METRIC_NAME):
            continue
        text = _metric_text(value)
        if text is not None:
            pairs.append((name, text))
    return tuple(sorted(pairs)[:MAX_METRICS])


def _metric_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return f"{value:.6g}"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value:
        return value[:MAX_METRIC_VALUE]
    return None


def observed_reports(config_map: Mapping[str, Any] | None) -> dict[str, Report]:
    """The reports in an observed progress ConfigMap, by reporter."""
    data = (config_map or {}).get("data") or {}
    if not isinstance(data, Mapping):
        return {}
    reports = {}
    for name, raw in data.items():
        report = read_report(raw)
        if report is not None:
            reports[name] = report
    return reports


def status_reports(old_progress: Any) -> dict[str, Report]:
    """The reports status.progress holds: its `reporters`, or its top level for a lone reporter."""
    if not isinstance(old_progress, Mapping):
        return {}
    entries = old_progress.get("reporters")
    if not isinstance(entries, list):
        entries = [old_progress]
    reports = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        name, report = entry.get("reporter", entry.get("name")), read_report(entry)
        if isinstance(name, str) and report is not None:
            reports[name] = report
    return reports


def current_reports(observed: Mapping[str, Report], recorded: Mapping[str, Report],
                    attempt: int) -> dict[str, Report]:
    """Each reporter's newest report of the current attempt, from the ConfigMap or the status.

    The newer of the two copies wins, so neither a stale ConfigMap (an older copy read after a
    newer status) nor a stale status can move a report back. Reports of an earlier attempt are
    the old processes', and say nothing of the new ones.
    """
    merged: dict[str, Report] = {}
    for source in (recorded, observed):
        for name, report in source.items():
            if report.attempt != attempt:
                continue
            have = merged.get(name)
            # On a tie the ConfigMap wins: two reports within one second, the later one is there.
            if have is None or report.moment > have.moment or (source is observed and report.moment == have.moment):
                merged[name] = report
    return {name: merged[name] for name in sorted(merged)[:MAX_REPORTERS]}


def progress_status(reports: Mapping[str, Report]) -> JSON | None:
    """status.progress: the report of the least advanced reporter (so the Progress column never
    shows more than the job has done, and Last Report the age of that reporter's report), with
    each reporter under `reporters` when there is more than one."""
    if not reports:
        return None
    slowest = min(reports, key=lambda n: (_advance(reports[n]), reports[n].moment, n))
    top = {"reporter": slowest, **_entry(reports[slowest])}
    if len(reports) > 1:
        top["reporters"] = [{"name": name, **_entry(reports[name])} for name in reports]
    return top


def _advance(report: Report) -> tuple[float, int]:
    percent = report.percent
    return (percent if percent is not None else math.inf, report.step if report.step is not None else 0)


def _entry(report: Report) -> JSON:
    entry: JSON = {"attempt": report.attempt}
    if report.step is not None:
        entry["step"] = report.step
    if report.total is not None:
        entry["total"] = report.total
    if report.percent is not None:
        entry["progressPercentage"] = report.percent
    if report.metrics:
        entry["metrics"] = _metric_list(report.metrics)
    entry["lastUpdatedTime"] = report.time
    return entry


def _metric_list(metrics: Iterable[tuple[str, str]]) -> list[JSON]:
    return [{"name": name, "value": value} for name, value in metrics]


# --- stalls ------------------------------------------------------------------------------------

# How long after a stall is first said RestartJob or FailJob acts, if no report comes meanwhile.
CONFIRM_SECONDS = 10
# The words the Running condition says a stall with (each kind's status), and warned_at finds.
STALL_WARNING = "may have stalled: no progress report"

class Silence(NamedTuple):
    """Which reporters have been silent past the timeout, and when the next one would be."""

    silent: tuple[str, ...]  # reporter names; ("",) when none has reported in time since `since`
    next_deadline: datetime | None  # the earliest deadline not yet passed (None: none left)


def silence(reports: Mapping[str, Report], *, since: datetime, now: datetime, timeout: int,
            finished: frozenset[str] = frozenset()) -> Silence:
    """Reporters silent for `timeout` seconds, each counted from its last report or from `since`
    (the job's Running, or its attempt's start), whichever is later; with no report at all, the
    job is silent `timeout` seconds after `since`. `finished` reporters (their pod has completed)
    are not expected to report."""
    silent: list[str] = []
    deadlines: list[datetime] = []
    active = {n: r for n, r in reports.items() if n not in finished}
    clocks = {n: max(since, r.moment) for n, r in active.items()} if active else {"": since}
    if reports and not active:
        return Silence((), None)
    for name, start in clocks.items():
        deadline = plus_seconds(start, timeout)
        if deadline is None:
            continue
        if now >= deadline:
            silent.append(name)
        else:
            deadlines.append(deadline)
    return Silence(tuple(sorted(silent)), min(deadlines) if deadlines else None)


def describe_silence(silent: tuple[str, ...], reports: Mapping[str, Report], timeout: int) -> str:
    """'no progress report for 600 s (runPolicy.stallPolicy.timeoutSeconds) from worker-0 (last:
    step 120 of 1000, 12%, at ...)', or 'no progress report in the first 600 s ...'."""
    if silent == ("",):
        return (f"no progress report within {timeout} s of running "
                f"(runPolicy.stallPolicy.timeoutSeconds)")
    parts = [f"{name} (last: {_last(reports[name])})" for name in silent]
    return (f"no progress report for {timeout} s (runPolicy.stallPolicy.timeoutSeconds) "
            f"from {', '.join(parts)}")


def _last(report: Report) -> str:
    what = []
    if report.step is not None:
        what.append(f"step {report.step}" + (f" of {report.total}" if report.total else ""))
    if report.percent is not None:
        what.append(f"{report.percent}%")
    return ", ".join([*what, f"at {report.time}"])


class StallVerdict(NamedTuple):
    """What one sync of a running job finds: the stall said (None: none), whether the action is due."""

    clause: str | None  # 'no progress report for ...'; with a RestartJob/FailJob still to come, it says so
    act: bool  # RestartJob or FailJob is due now
    resync_after: float | None  # seconds until the next deadline, when there is one


def judge_stall(policy: StallPolicy, reports: Mapping[str, Report], *, since: datetime, now: datetime,
                warned: datetime | None, finished: frozenset[str] = frozenset()) -> StallVerdict:
    """Whether a running job has stalled (silence), and whether its stallPolicy acts now.

    `warned`: since when the old status says the job may have stalled (warned_at). RestartJob and
    FailJob act only on a sync CONFIRM_SECONDS after that warning that still sees no report: a sync
    at the deadline may be handed a ConfigMap that misses a report just made (its informer lags the
    API server), and a restart or a failure cannot be taken back.
    """
    found = silence(reports, since=since, now=now, timeout=policy.timeout_seconds, finished=finished)
    resync = (found.next_deadline - now).total_seconds() if found.next_deadline is not None else None
    if not found.silent:
        return StallVerdict(None, False, resync)
    clause = describe_silence(found.silent, reports, policy.timeout_seconds)
    if policy.action == "Report":
        return StallVerdict(clause, False, resync)
    if warned is None or now < warned + timedelta(seconds=CONFIRM_SECONDS):
        due = (warned or now) + timedelta(seconds=CONFIRM_SECONDS)
        return StallVerdict(f"{clause}; runPolicy.stallPolicy.action {policy.action} follows "
                            f"unless a report comes within {CONFIRM_SECONDS} s", False, (due - now).total_seconds())
    return StallVerdict(clause, True, resync)


def warned_at(conditions: Iterable[Any], stalled_reason: str) -> datetime | None:
    """When the old status's Running condition began to say the job may have stalled, if it does."""
    running = next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Running"), None)
    if (running is None or running.get("status") != "True" or running.get("reason") != stalled_reason
            or STALL_WARNING not in str(running.get("message"))):
        return None
    return parse_time(running.get("lastUpdateTime"))
