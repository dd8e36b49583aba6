"""How a pod ended, in words a condition can quote: reason and message, bounded, from one place.

Both job kinds report a lost or failed pod the same way (`how_it_ended`): its exit code (a kill by
a signal named), why it ended, and the line of what it said that says what went wrong, cut so that
a condition (and a record that keeps it) stays small whatever a container writes to its
termination log.

Why it ended, most telling first:
- the pod's `TerminationTarget` condition when True: Kueue (v0.11 and later, plain-pod groups) adds
  it before it deletes every pod of a group it stops (`queue_eviction`), with reason
  `WorkloadEvictedDueTo<why>` (Preempted, PodsReadyTimeout, ClusterQueueStopped, Deactivated, ...),
  `WorkloadEvicted`, `WorkloadDeleted`, `NotAdmitted` or `NoMatchingWorkload`, and its message;
- the pod's `DisruptionTarget` condition when True: Kubernetes adds it before it disrupts a pod
  (PreemptionByScheduler, EvictionByEvictionAPI, DeletionByTaintManager, TerminationByKubelet),
  and the container then shows only a kill by signal, which says nothing of why;
- the pod's own `status.reason` (Evicted, DeadlineExceeded, ...);
- the container's terminated reason (OOMKilled, Error, ...).

Which line of a container's termination message (`quoted_line`): a process that fails prints what
went wrong last, so the last non-empty line, or, when the message holds a Python traceback, the
exception line after it (`ValueError: ...`), which is followed by nothing useful (`finally`
output, atexit lines). Under FallbackToLogsOnError, the policy the hooks give the main container,
the message is usually the tail of the log, cut by the kubelet to its last 80 lines and 2,048
bytes: the first line of a tail that long is cut in the middle, so it is never quoted; the last
line that looks like an error is quoted (shutdown chatter often follows it), and when none does,
the last line is quoted as what it is (`last log line: '...'`), not as the reason.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, NamedTuple

MAX_REASON = 64  # characters of a reason (Kubernetes' own are CamelCase words)
MAX_MESSAGE = 200  # characters of a termination message a condition quotes
DISRUPTION_TARGET = "DisruptionTarget"
# Kueue's own condition on a pod it stops (sigs.k8s.io/kueue v0.17.0, pkg/controller/jobs/pod
# `Stop`): server-side applied to the pod's status just before Kueue deletes it.
TERMINATION_TARGET = "TerminationTarget"
# The kubelet's cut of a log fallback: its last 80 lines, then its last 2,048 bytes. A message
# this close to the byte limit may begin in the middle of a line (a multi-byte character cut at
# the edge is dropped, hence the margin).
LOG_TAIL_BYTES = 2048
_MAYBE_CUT_BYTES = LOG_TAIL_BYTES - 4
TRACEBACK = "Traceback (most recent call last):"
# Words of a line that says something went wrong. A metric that has "error" in its name
# (`Train-error=0.05`, `validation error: 0.03`) is progress output, not a failure.
_LOOKS_LIKE_AN_ERROR = re.compile(
    r"error(?!\s*[=:]\s*[-+\d.])|exception|fatal|fail|panic|abort|killed|denied|refused|cannot|can't"
    r"|unable|invalid|not found|no such|not writable|read-only|timed out|timeout|out of memory|\boom\b"
    r"|segmentation fault|traceback|assert", re.IGNORECASE)
# A kill by a signal shows as exit code 128 + N; the usual ones by name (Linux numbering, fixed
# here so a message never depends on the platform the hooks run on).
_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
            9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}


class Said(NamedTuple):
    """The line of a message a condition quotes; `log`: only the last line of a log tail, in
    which nothing looked like an error."""

    text: str
    log: bool = False


def _bounded(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def first_line(value: Any, limit: int) -> str | None:
    """The first non-empty line of a text, at most `limit` characters (an ellipsis says it was cut)."""
    if not isinstance(value, str):
        return None
    line = next((part.strip() for part in value.splitlines() if part.strip()), "")
    return _bounded(line, limit) if line else None


def exception_line(lines: list[str]) -> str | None:
    """The exception line of the last Python traceback in `lines` (`KeyError: 'x'`): the first
    line after `Traceback (most recent call last):` that is not indented (the frames are)."""
    starts = [n for n, line in enumerate(lines) if line.strip() == TRACEBACK]
    if not starts:
        return None
    for line in lines[starts[-1] + 1:]:
        if line.strip() and not line[:1].isspace():
            return line.strip()
    return None


def quoted_line(value: Any, *, log_tail: bool, limit: int = MAX_MESSAGE) -> Said | None:
    """The line of a container's termination message that says what went wrong (see the module),
    at most `limit` characters; None when it has none. `log_tail`: the message may be the tail
    of the log (terminationMessagePolicy FallbackToLogsOnError); the last line that looks like an
    error is then quoted, and the last line as only that when none does. A message the process
    wrote itself (policy File) is quoted by its last line."""
    if not isinstance(value, str):
        return None
    lines = value.splitlines()
    if log_tail and len(value.encode()) >= _MAYBE_CUT_BYTES:
        lines = lines[1:]  # the tail began in the middle of this line
    exception = exception_line(lines)
    if exception is not None:
        return Said(_bounded(exception, limit))
    kept = [line.strip() for line in lines if line.strip()]
    if not kept:
        return None
    if not log_tail:
        return Said(_bounded(kept[-1], limit))
    error = next((line for line in [*reversed(_outside_notices(kept)), *reversed(kept)]
                  if _LOOKS_LIKE_AN_ERROR.search(line)), None)
    return Said(_bounded(error, limit)) if error is not None else Said(_bounded(kept[-1], limit), log=True)


def _outside_notices(lines: list[str]) -> list[str]:
    """The lines outside the notices framed by lines of dashes that mpiexec (OpenMPI) prints after a
    rank failed ("... the job has been aborted."): they would be the last lines that look like an
    error, while the rank's own error is above them."""
    kept, inside = [], False
    for line in lines:
        if len(line) >= 10 and set(line) == {"-"}:
            inside = not inside
        elif not inside:
            kept.append(line)
    return kept


def exit_words(code: int | None) -> str:
    """An exit code as a message says it: `exit code 1`, `exit code 137, killed by SIGKILL`."""
    if code is None:
        return "no exit code"
    signal = _SIGNALS.get(code - 128)
    return f"exit code {code}, killed by {signal}" if signal else f"exit code {code}"


def how_it_ended(code: int | None, reason: str | None, said: Said | None) -> str:
    """How a pod ended, for a condition: `exit code 1, reason Error: 'ERROR: ...'`, or with
    `, last log line: '...'` when the quoted line is only that."""
    text = exit_words(code)
    if reason:
        text += f", reason {reason}"
    if said is not None:
        text += f", last log line: {said.text!r}" if said.log else f": {said.text!r}"
    return text


def terminated(state: Any, key: str, limit: int) -> str | None:
    """A text field of a container state's `terminated` part, first line, bounded; None when there is none."""
    part = state.get("terminated") if isinstance(state, Mapping) else None
    return first_line(part.get(key), limit) if isinstance(part, Mapping) else None


def terminated_said(state: Any, *, log_tail: bool) -> Said | None:
    """The quoted line of a container state's termination message (quoted_line), if it has one."""
    part = state.get("terminated") if isinstance(state, Mapping) else None
    return quoted_line(part.get("message"), log_tail=log_tail) if isinstance(part, Mapping) else None


def exit_code(state: Any) -> int | None:
    """The exit code of a container state's `terminated` part, if it has one."""
    part = state.get("terminated") if isinstance(state, Mapping) else None
    code = part.get("exitCode") if isinstance(part, Mapping) else None
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _true_condition(status: Mapping[str, Any], ctype: str) -> Mapping[str, Any] | None:
    """The pod's condition of type `ctype` when it is True and names a reason, else None."""
    for cond in status.get("conditions") or ():
        # A decoded request holds dicts: test the exact type first, the ABC only for other mappings
        # (this runs for every condition of every observed pod on every sync).
        if ((type(cond) is dict or isinstance(cond, Mapping)) and cond.get("type") == ctype
                and cond.get("status") == "True" and first_line(cond.get("reason"), MAX_REASON)):
            return cond
    return None


def disruption(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's DisruptionTarget condition when it is True and names a reason, else None."""
    return _true_condition(status, DISRUPTION_TARGET)


def queue_eviction(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Kueue's TerminationTarget condition when it is True and names a reason, else None: the queue
    stopped the pod's group (evicted or preempted its Workload, found it not admitted, deleted or not
    matching), and deletes the pod."""
    return _true_condition(status, TERMINATION_TARGET)


def _system_said(value: Any) -> Said | None:
    """A message Kubernetes wrote (a condition's, the pod's): one line, quoted as it is."""
    line = first_line(value, MAX_MESSAGE)
    return Said(line) if line is not None else None


def end_of(status: Mapping[str, Any], state: Any, *, log_tail: bool = True) -> tuple[str | None, Said | None]:
    """Why a pod ended and what it said, bounded (see the module): its queue eviction's or
    disruption's reason and message, else its own, else its container's termination (quoted_line;
    `log_tail`: its container's policy is FallbackToLogsOnError). A message falls through on its
    own: a disruption without one still gives the reason, and the next message found."""
    disrupted = queue_eviction(status) or disruption(status)
    if disrupted is not None:
        reason = first_line(disrupted.get("reason"), MAX_REASON)
        message = _system_said(disrupted.get("message"))
        if message is not None:
            return reason, message
    else:
        reason = first_line(status.get("reason"), MAX_REASON) or terminated(state, "reason", MAX_REASON)
    return reason, _system_said(status.get("message")) or terminated_said(state, log_tail=log_tail)


# The framework container's default terminationMessagePolicy, where the user set none: the tail of
# its log becomes the termination message when it fails without writing one, so the job's status
# can still say why after the pod is gone.
LOG_FALLBACK = "FallbackToLogsOnError"


def with_log_fallback(container: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of a container with terminationMessagePolicy LOG_FALLBACK unless the user chose one."""
    return {**container, "terminationMessagePolicy": container.get("terminationMessagePolicy") or LOG_FALLBACK}


def is_log_tail(container: Any) -> bool:
    """Whether a container's termination message may be the tail of its log: its policy is
    LOG_FALLBACK, or unknown (the hooks give the main container LOG_FALLBACK unless the user chose)."""
    policy = container.get("terminationMessagePolicy") if isinstance(container, Mapping) else None
    return policy in (None, LOG_FALLBACK) or not isinstance(policy, str)
