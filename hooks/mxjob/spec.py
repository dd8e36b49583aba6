"""Parsing, defaulting and validation of an MXJob: the spec as users write it in, a typed MXJob out.

Defaults live here and only here; they are applied on every sync and never written back to the
object. Every problem found is reported with its field path and what to do about it, all at once,
so a user fixes a manifest in one round trip.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hooks.mxjob.names import child_name
from hooks.mxjob.network import PER_REPLICA, read_service_layout
from hooks.mxjob.vocabulary import (
    REPLICA_TYPES,
    SCHEDULER,
    SERVER,
    TRAIN_TYPES,
    TUNE_TYPES,
    TUNER,
    TUNER_SERVER,
    TUNER_TRACKER,
    WORKER,
)
from hooks.shared.errors import SpecError as SpecError  # re-exported: the kind's modules raise it from here
from hooks.shared.gang import SchedulingPolicy, check_min_available, parse_scheduling_policy
from hooks.shared.identity import JobIdentity
from hooks.shared.merge import collapsed
from hooks.shared.podtemplate import (
    A_CONTAINER,
    check_container_name,
    check_env,
    check_image,
    check_pod_spec,
    check_ports,
    check_template_metadata,
    each_object,
    is_port_number,
    show,
)
from hooks.shared.validation import DNS_1035_LABEL, MAX_INT32, is_non_negative_int

JOB_MODES = ("MXTrain", "MXTune")
RESTART_POLICIES = ("Always", "OnFailure", "Never", "ExitCode")
CLEAN_POD_POLICIES = ("All", "Running", "None")
SUCCESS_POLICIES = ("", "AllWorkers")

# Kueue (v0.5-v0.10) queues a job carrying this label (or, deprecated, this annotation) and
# reserves quota for the replica keys it finds spelt exactly as REPLICA_TYPES.
KUEUE_QUEUE_KEY = "kueue.x-k8s.io/queue-name"
MAIN_CONTAINER = "mxnet"
PORT_NAME = "mxjob-port"
DEFAULT_PORT = 9091
TUNER_KEY_ANNOTATION = "tuner-server-key"
MAX_NAME_LENGTH = 63  # DNS-1035 label: the limit for Service names
# Bounds checked before any work is sized by them; the CRD declares the same maximums.
MAX_REPLICAS = 5000  # per replica type; far above what MX_CONFIG lets start (see sync.size_problems)
MAX_SECONDS = MAX_INT32  # activeDeadlineSeconds, ttlSecondsAfterFinished (about 68 years)
MAX_BACKOFF_LIMIT = MAX_INT32  # as the status counters it is compared with
MAX_PROBLEMS = 20  # a message listing more helps no one and makes status huge

_CANONICAL = {t.lower(): t for t in REPLICA_TYPES}
_RUN_POLICY_MAX = {"ttlSecondsAfterFinished": MAX_SECONDS, "activeDeadlineSeconds": MAX_SECONDS,
                   "backoffLimit": MAX_BACKOFF_LIMIT}
_RUN_POLICY_INTS = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
_RUN_POLICY_FIELDS = ("cleanPodPolicy", *_RUN_POLICY_INTS, "suspend", "schedulingPolicy")
# runPolicy.failurePolicy (docs/lifecycle.md, "Restarts"): what a lost pod does to the job.
RESTART_JOB, RESTART_POD, FAIL_JOB = "RestartJob", "RestartPod", "FailJob"
FAILURE_ACTIONS = (RESTART_JOB, RESTART_POD, FAIL_JOB)
MAX_FAILURE_RULES = 16
MAX_RULE_EXIT_CODES = 32


@dataclass(frozen=True)
class FailureRule:
    """One rule of runPolicy.failurePolicy.rules: the action for a lost pod it matches."""

    action: str
    replica_types: frozenset[str] | None = None  # None: every type
    exit_codes: frozenset[int] | None = None  # None: every code, and a pod lost without one


@dataclass(frozen=True)
class FailurePolicy:
    """runPolicy.failurePolicy: rules tried in order, and the budget of whole-job restarts."""

    rules: tuple[FailureRule, ...] = ()
    max_restarts: int | None = None  # None: only backoffLimit bounds job restarts


@dataclass(frozen=True)
class ReplicaSpec:
    """One entry of spec.mxReplicaSpecs with defaults applied."""

    type: str
    replicas: int
    restart_policy: str
    template: Mapping[str, Any]
    port: int
    tuner_key: str
    path: str = ""  # where it is in the spec, the key as the user spelt it, for messages

    @property
    def name(self) -> str:
        """The lower-case type used in names, labels and DMLC_ROLE."""
        return self.type.lower()


@dataclass(frozen=True)
class RunPolicy:
    """spec.runPolicy merged with the legacy inline fields, runPolicy winning."""

    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    suspend: bool = False
    scheduling: SchedulingPolicy = field(default_factory=SchedulingPolicy)
    scheduling_path: str = "spec.runPolicy.schedulingPolicy"
    failure: FailurePolicy = field(default_factory=FailurePolicy)


@dataclass(frozen=True)
class MXJob(JobIdentity):
    """A valid MXJob: identity plus the parsed spec."""

    job_mode: str
    success_policy: str
    run_policy: RunPolicy
    replicas: dict[str, ReplicaSpec] = field(default_factory=dict)  # canonical type order
    service_layout: str = PER_REPLICA  # hooks.mxjob.network

    def has(self, rtype: str) -> bool:
        """Whether the job has at least one replica of this type."""
        spec = self.replicas.get(rtype)
        return spec is not None and spec.replicas > 0

    @property
    def deciding_type(self) -> str:
        """The replica type whose pods decide the job: the one rule behind success and job-role.

        MXTune: the Tuner. MXTrain: the Scheduler, unless there is none or successPolicy is
        AllWorkers; then every Worker.
        """
        if self.job_mode == "MXTune":
            return TUNER
        if not self.has(SCHEDULER) or self.success_policy == "AllWorkers":
            return WORKER
        return SCHEDULER

    def is_master(self, rtype: str) -> bool:
        """Whether pods of this type carry job-role: master: the one pod whose exit decides the job.

        When several pods decide (every Worker), none of them is "the" master, so none is labelled.
        """
        return rtype == self.deciding_type and self.replicas[rtype].replicas == 1

    @property
    def total_replicas(self) -> int:
        """How many pods the job has: every replica of every type."""
        return total_replicas(self.replicas)

    def deciding_slots(self) -> list[tuple[str, int]]:
        """Every (replica type, index) whose pod must succeed for the job to succeed."""
        rtype = self.deciding_type
        return [(rtype, i) for i in range(self.replicas[rtype].replicas)]


def parse_mxjob(parent: Mapping[str, Any], *, gang: bool = False) -> MXJob:
    """Parse and validate the parent MXJob, raising SpecError listing every problem.

    schedulingPolicy is read (and checked) only when gang scheduling is on: without it the field
    has no effect, so a job that applied before gang scheduling existed must not start failing.
    """
    problems: list[str] = []
    meta = parent.get("metadata") or {}
    name = meta.get("name", "")
    namespace = meta.get("namespace") or "default"
    spec = parent.get("spec")
    if not isinstance(spec, Mapping):
        raise SpecError(["spec: must be an object with mxReplicaSpecs; add a spec to the MXJob"])

    job_mode = _or_default(spec.get("jobMode"), "MXTrain")
    if job_mode not in JOB_MODES:
        problems.append(f"spec.jobMode: {show(job_mode)} is not one of {', '.join(JOB_MODES)}")
    success_policy = _or_default(spec.get("successPolicy"), "")
    if success_policy not in SUCCESS_POLICIES:
        problems.append(f"spec.successPolicy: {show(success_policy)} is not one of \"\", AllWorkers")
    run_policy = _parse_run_policy(spec, problems, gang=gang)
    replicas = _parse_replica_specs(spec.get("mxReplicaSpecs"), problems)
    _check_queued_keys(meta, replicas, problems)
    if job_mode in JOB_MODES:
        _check_mode(job_mode, replicas, problems)
    _check_names(name, replicas, problems)
    service_layout = read_service_layout(meta, problems)
    check_min_available(run_policy.scheduling, total_replicas(replicas), run_policy.scheduling_path,
                        problems)
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[:MAX_PROBLEMS], f"and {len(problems) - MAX_PROBLEMS} more problems"]
    if problems:
        raise SpecError(problems)
    return MXJob(name=name, namespace=namespace, uid=meta.get("uid", ""), job_mode=job_mode,
                 success_policy=success_policy, run_policy=run_policy, replicas=replicas,
                 service_layout=service_layout)


def _parse_run_policy(spec: Mapping[str, Any], problems: list[str], *, gang: bool) -> RunPolicy:
    run_policy = _or_default(spec.get("runPolicy"), {})
    if not isinstance(run_policy, Mapping):
        problems.append("spec.runPolicy: must be an object")
        run_policy = {}
    # Per field, so a manifest that mixes the two layouts keeps every value it gives.
    merged: dict[str, Any] = {}
    paths: dict[str, str] = {}
    for key in _RUN_POLICY_FIELDS:
        if key in run_policy and run_policy[key] is not None:
            merged[key], paths[key] = run_policy[key], f"spec.runPolicy.{key}"
        elif key in spec and spec[key] is not None:
            merged[key], paths[key] = spec[key], f"spec.{key}"

    clean = merged.get("cleanPodPolicy", "Running")
    if clean not in CLEAN_POD_POLICIES:
        problems.append(f"{paths['cleanPodPolicy']}: {show(clean)} is not one of All, Running, None")
    ints: dict[str, int | None] = {}
    for key in _RUN_POLICY_INTS:
        value = merged.get(key)
        if value is not None and not is_non_negative_int(value, _RUN_POLICY_MAX[key]):
            problems.append(f"{paths[key]}: must be a non-negative integer of at most {_RUN_POLICY_MAX[key]}, "
                            f"got {show(value)}")
            value = None
        elif key == "activeDeadlineSeconds" and value == 0:
            # As for a batch/v1 Job (and our CRD): a zero deadline would fail every job at once.
            problems.append(f"{paths[key]}: must be at least 1 (seconds), got 0")
            value = None
        ints[key] = value
    suspend = merged.get("suspend", False)
    if not isinstance(suspend, bool):
        problems.append(f"{paths['suspend']}: must be true or false, got {show(suspend)}")
        suspend = False
    scheduling_path = paths.get("schedulingPolicy", "spec.runPolicy.schedulingPolicy")
    scheduling = parse_scheduling_policy(merged.get("schedulingPolicy") if gang else None,
                                         scheduling_path, problems)
    return RunPolicy(clean_pod_policy=clean,
                     ttl_seconds_after_finished=ints["ttlSecondsAfterFinished"],
                     active_deadline_seconds=ints["activeDeadlineSeconds"],
                     backoff_limit=ints["backoffLimit"], suspend=suspend,
                     scheduling=scheduling, scheduling_path=scheduling_path,
                     failure=_parse_failure_policy(run_policy.get("failurePolicy"), problems))


def _parse_failure_policy(raw: Any, problems: list[str]) -> FailurePolicy:
    """spec.runPolicy.failurePolicy: {maxRestarts, rules: [{action, onReplicaTypes, onExitCodes}]}."""
    path = "spec.runPolicy.failurePolicy"
    if raw is None:
        return FailurePolicy()
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object")
        return FailurePolicy()
    max_restarts = raw.get("maxRestarts")
    if max_restarts is not None and not is_non_negative_int(max_restarts, MAX_BACKOFF_LIMIT):
        problems.append(f"{path}.maxRestarts: must be a non-negative integer of at most {MAX_BACKOFF_LIMIT}, "
                        f"got {show(max_restarts)}")
        max_restarts = None
    raw_rules = _or_default(raw.get("rules"), [])
    if not isinstance(raw_rules, list) or len(raw_rules) > MAX_FAILURE_RULES:
        problems.append(f"{path}.rules: must be a list of at most {MAX_FAILURE_RULES} rules")
        raw_rules = []
    rules = []
    for i, rule in enumerate(raw_rules):
        at = f"{path}.rules[{i}]"
        if not isinstance(rule, Mapping):
            problems.append(f"{at}: must be an object")
            continue
        # Every field of a rule is checked, so one answer names every problem of it.
        before = len(problems)
        action = rule.get("action")
        if action not in FAILURE_ACTIONS:
            problems.append(f"{at}.action: {show(action)} is not one of {', '.join(FAILURE_ACTIONS)}")
        types: frozenset[str] | None = None
        if rule.get("onReplicaTypes") is not None:
            value = rule["onReplicaTypes"]
            if isinstance(value, list) and value and all(v in REPLICA_TYPES for v in value):
                types = frozenset(value)
            else:
                problems.append(f"{at}.onReplicaTypes: must be a non-empty list of {', '.join(REPLICA_TYPES)}")
        codes: frozenset[int] | None = None
        if rule.get("onExitCodes") is not None:
            value = rule["onExitCodes"]
            if isinstance(value, list) and 0 < len(value) <= MAX_RULE_EXIT_CODES and all(is_non_negative_int(v, 255) for v in value):
                codes = frozenset(value)
            else:
                problems.append(f"{at}.onExitCodes: must be a list of 1 to {MAX_RULE_EXIT_CODES} exit codes from 0 to 255")
        if len(problems) > before:
            continue
        rules.append(FailureRule(str(action), types, codes))
    return FailurePolicy(tuple(rules), max_restarts)


def _parse_replica_specs(raw: Any, problems: list[str]) -> dict[str, ReplicaSpec]:
    if not isinstance(raw, Mapping) or not raw:
        problems.append("spec.mxReplicaSpecs: required; give at least a Worker replica spec")
        return {}
    seen: dict[str, str] = {}
    parsed: dict[str, ReplicaSpec] = {}
    for key in raw:
        path = f"spec.mxReplicaSpecs.{show(key, quote=False)}"
        rtype = _CANONICAL.get(str(key).lower())
        if rtype is None:
            problems.append(f"{path}: unknown replica type; use one of {', '.join(REPLICA_TYPES)}")
            continue
        if rtype in seen:
            problems.append(f"{path}: duplicates {show(seen[rtype])} (replica types are "
                            f"case-insensitive); keep one of them")
            continue
        seen[rtype] = key
        spec = _parse_replica_spec(rtype, path, raw[key], problems)
        if spec is not None:
            parsed[rtype] = spec
    return {t: parsed[t] for t in REPLICA_TYPES if t in parsed}


def _check_queued_keys(meta: Mapping[str, Any], replicas: Mapping[str, ReplicaSpec],
                       problems: list[str]) -> None:
    """A job queued in Kueue must spell its replica keys exactly: Kueue counts no other key.

    Kueue looks replica keys up verbatim, so the pods of a `worker` key would run outside the
    quota its queue reserved. Without a queue the keys stay case-insensitive, as always.
    """
    queued = any(isinstance(m, Mapping) and KUEUE_QUEUE_KEY in m
                 for m in (meta.get("labels"), meta.get("annotations")))
    if not queued:
        return
    for rtype, spec in replicas.items():
        if spec.path != f"spec.mxReplicaSpecs.{rtype}":
            problems.append(f"{spec.path}: a job queued in Kueue (label {KUEUE_QUEUE_KEY}) must "
                            f"spell its replica types exactly, as Kueue counts them; rename it to {rtype}")


def _parse_replica_spec(rtype: str, path: str, raw: Any, problems: list[str]) -> ReplicaSpec | None:
    if not isinstance(raw, Mapping):
        problems.append(f"{path}: must be an object with replicas, restartPolicy and template")
        return None
    replicas = raw.get("replicas", 1)
    if replicas is None:
        replicas = 1
    if not is_non_negative_int(replicas, MAX_REPLICAS):
        # Checked before anything is sized by it: names, MX_CONFIG and slots all grow with it.
        problems.append(f"{path}.replicas: must be a non-negative integer of at most {MAX_REPLICAS}, "
                        f"got {show(replicas)}")
        replicas = 0
    # Only an absent or null field takes the default: a falsy {} or "" is a mistake to report.
    restart_policy = _or_default(raw.get("restartPolicy"), "Never")
    if restart_policy not in RESTART_POLICIES:
        problems.append(f"{path}.restartPolicy: {show(restart_policy)} is not one of "
                        f"{', '.join(RESTART_POLICIES)}")
        restart_policy = "Never"
    if raw.get("label") is not None and not isinstance(raw["label"], str):
        problems.append(f"{path}.label: must be a string (the TunerServer RPC key)")
    template = raw.get("template")
    port = _check_template(path, template, problems)
    tuner_key = _tuner_key(template, raw.get("label"))
    return ReplicaSpec(type=rtype, replicas=replicas, restart_policy=restart_policy,
                       template=template if isinstance(template, Mapping) else {},
                       port=port, tuner_key=tuner_key, path=path)


def _check_template(path: str, template: Any, problems: list[str]) -> int:
    """Check every part of the pod template the hook reads or adds to; return the mxjob-port."""
    fix = f'add a container named "{MAIN_CONTAINER}" with the training image'
    if not isinstance(template, Mapping):
        problems.append(f"{path}.template: required; {fix}")
        return DEFAULT_PORT
    check_template_metadata(f"{path}.template.metadata", template.get("metadata"), problems)
    pod_spec = template.get("spec")
    if pod_spec is not None and not isinstance(pod_spec, Mapping):
        problems.append(f"{path}.template.spec: must be an object (a PodSpec)")
        return DEFAULT_PORT
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    cpath = f"{path}.template.spec.containers"
    if not isinstance(containers, list) or not containers:
        problems.append(f"{cpath}: required, a list of containers; {fix}")
        return DEFAULT_PORT
    main, main_path = None, ""
    names: list[str] = []
    for here, container in each_object(cpath, containers, problems, expected=A_CONTAINER):
        name = container.get("name")
        if check_container_name(here, name, names, problems):
            names.append(str(name))
        if name == MAIN_CONTAINER:
            main, main_path = container, f"{cpath}[name={MAIN_CONTAINER}]"
        else:
            check_image(f"{here}.image", container.get("image"), problems)
        check_env(f"{here}.env", container.get("env"), problems)
        check_ports(f"{here}.ports", container.get("ports"), problems)
    if isinstance(pod_spec, Mapping):  # it is, as it has containers
        check_pod_spec(f"{path}.template.spec", pod_spec, names, problems)
    if main is None:
        problems.append(f'{cpath}: no container named "{MAIN_CONTAINER}"; {fix}')
        return DEFAULT_PORT
    check_image(f"{main_path}.image", main.get("image"), problems)
    return _mxjob_port(main_path, main.get("ports"), problems)


def _mxjob_port(path: str, ports: Any, problems: list[str]) -> int:
    """The mxjob-port number, and no two ports of the job's Service with one number.

    Metacontroller merges a Service's ports by `port` alone (hooks.shared.merge), so one number on
    two protocols (or twice) would give a Service the API server refuses on every later sync.
    """
    if not isinstance(ports, list):
        return DEFAULT_PORT
    if not all(isinstance(p, Mapping) and is_port_number(p.get("containerPort"))
               and isinstance(p.get("protocol") or "TCP", str) for p in ports):
        return DEFAULT_PORT  # reported by check_ports
    number = next((p["containerPort"] for p in ports if p.get("name") == PORT_NAME), DEFAULT_PORT)
    for index, _, value in collapsed(main_ports(ports, number)):
        first = next(i for i, p in enumerate(ports) if p["containerPort"] == value)
        if index < len(ports):
            problems.append(f"{path}.ports[{index}].containerPort: port {value} is also ports[{first}]; the "
                            f"job's Service can list a number only once (Metacontroller merges its ports by "
                            f"number alone, whatever the protocol), so remove one or use another number")
        else:
            problems.append(f"{path}.ports[{first}].containerPort: {value} is the number of the {PORT_NAME} "
                            f"(TCP) the operator adds; name this port {PORT_NAME} or use another number")
    return number


def main_ports(user_ports: Any, port: int) -> list[dict[str, Any]]:
    """The mxnet container's ports plus mxjob-port, unless it is there by name or by number.

    A user port already on the same number/TCP stays as it is: adding mxjob-port beside it would
    give the Service two ports with one number, which the API server refuses.
    """
    ports: list[dict[str, Any]] = [dict(p) for p in user_ports or []]
    if not any(p.get("name") == PORT_NAME or (p.get("containerPort") == port
                                              and (p.get("protocol") or "TCP") == "TCP")
               for p in ports):
        ports.append({"name": PORT_NAME, "containerPort": port})
    return ports


def _tuner_key(template: Any, label: Any) -> str:
    annotations: Any = {}
    if isinstance(template, Mapping) and isinstance(template.get("metadata"), Mapping):
        annotations = template["metadata"].get("annotations") or {}
    key = annotations.get(TUNER_KEY_ANNOTATION) if isinstance(annotations, Mapping) else None
    if isinstance(key, str) and key:
        return key
    return label if isinstance(label, str) else ""


def _check_mode(job_mode: str, replicas: dict[str, ReplicaSpec], problems: list[str]) -> None:
    own, other = (TRAIN_TYPES, TUNE_TYPES) if job_mode == "MXTrain" else (TUNE_TYPES, TRAIN_TYPES)
    for rtype in replicas:
        if rtype in other:
            problems.append(f"spec.mxReplicaSpecs.{rtype}: not used by jobMode {job_mode}; "
                            f"use {', '.join(own)}")

    def count(rtype: str) -> int | None:
        return replicas[rtype].replicas if rtype in replicas else None

    def need(rtype: str, ok: bool, rule: str) -> None:
        # A count that is itself invalid was reported already; a rule about it would only repeat that.
        if any(p.startswith(f"spec.mxReplicaSpecs.{rtype}.replicas:") for p in problems):
            return
        if not ok:
            got = "none" if count(rtype) is None else count(rtype)
            problems.append(f"spec.mxReplicaSpecs.{rtype}.replicas: {rule}, got {got}")

    if job_mode == "MXTrain":
        need(WORKER, (count(WORKER) or 0) >= 1, f"at least 1 {WORKER} is required")
        distributed = SCHEDULER in replicas or SERVER in replicas
        if distributed:
            need(SCHEDULER, count(SCHEDULER) == 1,
                 f"a distributed job needs exactly 1 {SCHEDULER}")
            need(SERVER, (count(SERVER) or 0) >= 1,
                 f"a distributed job needs at least 1 {SERVER}")
    else:
        need(TUNER_TRACKER, count(TUNER_TRACKER) == 1, f"MXTune needs exactly 1 {TUNER_TRACKER}")
        need(TUNER_SERVER, (count(TUNER_SERVER) or 0) >= 1, f"MXTune needs at least 1 {TUNER_SERVER}")
        need(TUNER, count(TUNER) == 1, f"MXTune needs exactly 1 {TUNER}")


def _check_names(name: str, replicas: dict[str, ReplicaSpec], problems: list[str]) -> None:
    if not name:
        problems.append("metadata.name: required")
        return
    if not DNS_1035_LABEL.match(name):
        problems.append(f"metadata.name: {show(name)} must start with a letter and contain only "
                        f"lower-case letters, digits and '-' (it prefixes Service names)")
        return
    longest = max((child_name(name, s.type, max(s.replicas - 1, 0)) for s in replicas.values()),
                  key=len, default="")
    if len(longest) > MAX_NAME_LENGTH:
        allowed = MAX_NAME_LENGTH - (len(longest) - len(name))
        problems.append(f"metadata.name: too long: the Service name {longest!r} would have "
                        f"{len(longest)} characters (the limit is {MAX_NAME_LENGTH}); use a job "
                        f"name of at most {allowed} characters")


def total_replicas(replicas: Mapping[str, ReplicaSpec]) -> int:
    """How many pods a job with these replica specs has."""
    return sum(s.replicas for s in replicas.values())


def _or_default(value: Any, default: Any) -> Any:
    """The default for an absent (null) field only: a falsy {} or "" is a value to validate."""
    return default if value is None else value


