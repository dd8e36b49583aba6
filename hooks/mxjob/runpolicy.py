"""spec.runPolicy of an MXJob, parsed, defaulted and validated (a part of hooks.mxjob.spec).

The legacy fields of the same names directly under spec are read too, field by field, a value
under runPolicy winning; runPolicy.failurePolicy says what a lost pod does to the job.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hooks.mxjob.vocabulary import (
    CLEAN_POD_POLICIES,
    FAILURE_ACTIONS,
    REPLICA_TYPES,
    CleanPodPolicy,
    FailureAction,
    choices,
    one_of,
)
from hooks.shared.gang import SchedulingPolicy, parse_scheduling_policy
from hooks.shared.messages import show
from hooks.shared.progress import NO_PROGRESS, ProgressPolicy, parse_progress_policy
from hooks.shared.validation import MAX_INT32, is_non_negative_int

# Bounds checked before any work is sized by them; the CRD declares the same maximums.
MAX_SECONDS = MAX_INT32  # activeDeadlineSeconds, ttlSecondsAfterFinished (about 68 years)
MAX_BACKOFF_LIMIT = MAX_INT32  # as the status counters it is compared with
_RUN_POLICY_MAX = {"ttlSecondsAfterFinished": MAX_SECONDS, "activeDeadlineSeconds": MAX_SECONDS,
                   "backoffLimit": MAX_BACKOFF_LIMIT}
_RUN_POLICY_INTS = ("ttlSecondsAfterFinished", "activeDeadlineSeconds", "backoffLimit")
_RUN_POLICY_FIELDS = ("cleanPodPolicy", *_RUN_POLICY_INTS, "suspend", "schedulingPolicy")
MAX_FAILURE_RULES = 16
MAX_RULE_EXIT_CODES = 32


@dataclass(frozen=True)
class FailureRule:
    """One rule of runPolicy.failurePolicy.rules: the action for a lost pod it matches."""

    action: FailureAction
    replica_types: frozenset[str] | None = None  # None: every type
    exit_codes: frozenset[int] | None = None  # None: every code, and a pod lost without one


@dataclass(frozen=True)
class FailurePolicy:
    """runPolicy.failurePolicy: rules tried in order, and the budget of whole-job restarts."""

    rules: tuple[FailureRule, ...] = ()
    max_restarts: int | None = None  # None: only backoffLimit bounds job restarts


@dataclass(frozen=True)
class RunPolicy:
    """spec.runPolicy merged with the legacy inline fields, runPolicy winning."""

    clean_pod_policy: CleanPodPolicy = "Running"
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    suspend: bool = False
    scheduling: SchedulingPolicy = field(default_factory=SchedulingPolicy)
    scheduling_path: str = "spec.runPolicy.schedulingPolicy"
    failure: FailurePolicy = field(default_factory=FailurePolicy)
    progress: ProgressPolicy = NO_PROGRESS  # runPolicy.progress and stallPolicy (hooks.shared.progress)


def parse_run_policy(spec: Mapping[str, Any], problems: list[str], *, gang: bool) -> RunPolicy:
    run_policy = or_default(spec.get("runPolicy"), {})
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

    raw_clean = merged.get("cleanPodPolicy", "Running")
    clean = one_of(raw_clean, CLEAN_POD_POLICIES)
    if clean is None:
        problems.append(f"{paths['cleanPodPolicy']}: {show(raw_clean)} is not one of {choices(CLEAN_POD_POLICIES)}")
        clean = "Running"
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
                     failure=_parse_failure_policy(run_policy.get("failurePolicy"), problems),
                     progress=parse_progress_policy(run_policy, problems))


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
    raw_rules = or_default(raw.get("rules"), [])
    if not isinstance(raw_rules, list) or len(raw_rules) > MAX_FAILURE_RULES:
        problems.append(f"{path}.rules: must be a list of at most {MAX_FAILURE_RULES} rules")
        raw_rules = []
    rules = [_parse_rule(f"{path}.rules[{i}]", rule, problems) for i, rule in enumerate(raw_rules)]
    return FailurePolicy(tuple(rule for rule in rules if rule is not None), max_restarts)


def _parse_rule(at: str, rule: Any, problems: list[str]) -> FailureRule | None:
    """One rule of failurePolicy.rules, or None when it has a problem.

    Every field of a rule is checked, so one answer names every problem of it.
    """
    if not isinstance(rule, Mapping):
        problems.append(f"{at}: must be an object")
        return None
    before = len(problems)
    action = one_of(rule.get("action"), FAILURE_ACTIONS)
    if action is None:
        problems.append(f"{at}.action: {show(rule.get('action'))} is not one of {choices(FAILURE_ACTIONS)}")
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
        if (isinstance(value, list) and 0 < len(value) <= MAX_RULE_EXIT_CODES
                and all(is_non_negative_int(v, 255) for v in value)):
            codes = frozenset(value)
        else:
            problems.append(f"{at}.onExitCodes: must be a list of 1 to {MAX_RULE_EXIT_CODES} exit codes from 0 to 255")
    if len(problems) > before or action is None:
        return None
    return FailureRule(action, types, codes)


def or_default(value: Any, default: Any) -> Any:
    """The default for an absent (null) field only: a falsy {} or "" is a value to validate."""
    return default if value is None else value
