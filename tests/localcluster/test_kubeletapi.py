"""What the kubelet's log endpoint serves from a log file that holds every pod of one name: the current
container instance, or with `previous` the one before it in the same pod, as a real kubelet would."""

from __future__ import annotations

import pytest

from localcluster.node.kubeletapi import instance_log


def start(n: int, pod: str = "p", container: str = "main") -> str:
    return f"=== localcluster: pod {pod} container {container} start #{n} at T: ['sh']\n"


EXITED = "=== localcluster: container main exited with code 1 at T\n"
# An earlier pod p (started, restarted once), then the pod p of now (started, restarted twice).
OLD_POD = start(0) + "old pod run 0\n" + EXITED + start(1) + "old pod run 1\n" + EXITED
FILE = (OLD_POD + start(0) + "new pod run 0\n" + EXITED + start(1) + "new pod run 1\n" + EXITED + start(2) + "new pod run 2\n")

CASES = {
    "the-current-instance-only": (FILE, 2, False, start(2) + "new pod run 2\n"),
    "previous-is-the-one-before-in-the-same-pod": (FILE, 2, True, start(1) + "new pod run 1\n" + EXITED),
    "a-new-pod-never-shows-the-old-pods-log": (OLD_POD + start(0) + "new pod run 0\n", 0, False,
                                               start(0) + "new pod run 0\n"),
    "previous-of-a-first-instance-is-nothing": (start(0) + "only\n", 0, True, ""),
    "a-pod-that-has-written-nothing-yet": ("", 0, False, ""),
    "another-pods-or-containers-start-line-is-not-a-boundary": (
        start(0) + "a\n" + start(0, pod="p2") + start(0, container="side") + "b\n", 0, False,
        start(0) + "a\n" + start(0, pod="p2") + start(0, container="side") + "b\n"),
    "a-start-line-printed-by-the-program-mid-line-is-not-one": (
        start(0) + "x " + start(1) + "y\n", 0, False, start(0) + "x " + start(1) + "y\n"),
}


@pytest.mark.parametrize(("text", "restarts", "previous", "expected"), CASES.values(), ids=CASES.keys())
def test_the_log_of_one_container_instance(text, restarts, previous, expected):
    assert instance_log(text.encode(), "p", "main", restarts, previous=previous) == expected.encode()
