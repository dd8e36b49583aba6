"""The one rule both kinds follow when Kueue stops a job's pod group (hooks.shared.kueue): which pod is evicted
by the queue, what its attempt record keeps, that such an attempt is not counted, and that the words a
condition says read back into the same record (a restart the status shows before its record is observed is
answered again from them)."""
from __future__ import annotations

import pytest

from hooks.shared.kueue import (
    counts_against_restarts,
    evicted_by_queue,
    eviction_cause,
    eviction_from_cause,
    eviction_record,
)

STOPPED = {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvictedDueToPreempted",
           "message": "Preempted to accommodate a workload (UID: 7f3c) due to prioritization in the ClusterQueue"}


@pytest.mark.parametrize(("phase", "terminating", "condition", "evicted"), [
    ("Running", True, STOPPED, True),
    ("Failed", False, STOPPED, True),
    ("Failed", True, STOPPED, True),
    ("Running", False, STOPPED, False),  # marked, not deleted yet: Kueue deletes it next
    ("Succeeded", True, STOPPED, False),  # a success stays one (Kueue deletes those of a deleted Workload)
    ("Running", True, {**STOPPED, "status": "False"}, False),
    ("Running", True, {**STOPPED, "type": "DisruptionTarget"}, False),  # kube-scheduler's, a counted loss
    ("Running", True, {**STOPPED, "reason": ""}, False),
], ids=["going", "stopped", "stopped-and-going", "marked-only", "succeeded", "not-true", "a-disruption",
        "no-reason"])
def test_a_pod_is_evicted_by_the_queue_when_kueue_marked_it_and_it_goes_or_has_stopped(phase, terminating, condition,
                                                                                      evicted):
    status = {"phase": phase, "conditions": [condition]}
    assert (evicted_by_queue(status, terminating=terminating) is not None) is evicted


@pytest.mark.parametrize(("data", "counted"), [
    ({"queueEviction": {"reason": "WorkloadEvicted"}}, False),
    ({"queueEviction": {}}, False),
    ({"lost": "pod p was lost (...)"}, True),
    ({"stalled": "no report for 60 s"}, True),
    ({"queueEviction": "WorkloadEvicted"}, True),  # not the shape the hook writes
], ids=["eviction", "eviction-without-words", "loss", "stall", "malformed"])
def test_only_an_attempt_a_queue_eviction_began_is_not_counted(data, counted):
    assert counts_against_restarts(data) is counted


@pytest.mark.parametrize(("reason", "message", "words"), [
    ("WorkloadEvictedDueToPreempted", STOPPED["message"],
     f"Kueue evicted it (WorkloadEvictedDueToPreempted: '{STOPPED['message']}')"),
    ("NotAdmitted", None, "Kueue evicted it (NotAdmitted)"),
    ("WorkloadEvicted", "it's \"quoted\"; and: colons", "Kueue evicted it (WorkloadEvicted: 'it\\'s \"quoted\"; and: colons')"),
    (None, "m", "Kueue evicted it (no reason given: 'm')"),
], ids=["preempted", "no-message", "quotes-and-colons", "no-reason"])
def test_the_words_of_an_eviction_read_back_into_the_record_they_were_said_from(reason, message, words):
    record = eviction_record(reason, message)
    assert eviction_cause(record) == words
    if reason is not None:
        assert eviction_from_cause(words) == record


def test_words_that_do_not_parse_keep_what_they_say_as_the_reason():
    assert eviction_from_cause("Kueue evicted it (Odd: 'unclosed)") == {"reason": "Odd: 'unclosed"}
