"""Watching a scene's syncs under Metacontroller's stale reads (tests/shared/test_stale_reads.py and the
modules that run their own scenes so): every status stored, every answer computed twice, and the
checks that hold whatever a sync read."""
from __future__ import annotations

import json
from typing import Any

from helpers.mcsim import Stepped
from localcluster.metacontroller import Stale

TERMINAL = ("Succeeded", "Failed", "Complete")
MODES: list[Stale | None] = [None, "parent", "children"]
STALE_MODES: list[Stale] = ["parent", "children"]


def terminal(status: dict | None) -> str | None:
    """The True terminal condition of a status, if any."""
    for cond in (status or {}).get("conditions") or []:
        if cond.get("type") in TERMINAL and cond.get("status") == "True":
            return str(cond["type"])
    return None


def essence(status: dict) -> dict:
    """A status without the order of its condition history (which transitions a sync saw depends on
    how stale its read was), but with every True condition's type, reason and message."""
    true = sorted((c["type"], c.get("reason"), c.get("message")) for c in status.get("conditions") or [] if c.get("status") == "True")
    return {**{k: v for k, v in status.items() if k != "conditions"}, "true conditions": true}


class Watch:
    """What a scene's syncs wrote, checked as they happen: every status stored after a sync, every
    answer computed twice from the request the emulation sent (byte-identical, or the test fails),
    and how many objects of the job's run kind (Pod, or the master Job) existed when an outcome
    was first written."""

    def __init__(self, sim: Stepped, run_kind: str):
        self.sim, self.run_kind = sim, run_kind
        self.statuses: list[dict] = []
        self.wrote = False
        self.runs_at_decision: int | None = None
        hook = sim._hook

        def twice(request: Any, **kwargs: Any) -> Any:
            first = json.dumps(hook(request, **kwargs), sort_keys=True)
            answer = hook(request, **kwargs)
            assert json.dumps(answer, sort_keys=True) == first, "the same request gave two answers"
            return answer

        sim._hook = twice

    def runs_created(self) -> list[str]:
        return [entry for entry in self.sim.created if entry.split("/")[0].split(".")[0] == self.run_kind]

    def sync(self, *, stale_now: bool = True) -> dict:
        """One sync; with the scene in "parent" mode, `stale_now=False` makes this one read fresh."""
        emulation = self.sim.emulation
        mode = emulation.stale
        if mode == "parent" and not stale_now:
            emulation.stale = None  # the cache caught up before this sync (the emulation still tracks the write)
        try:
            self.wrote = emulation.sync(self.sim.uid)
        finally:
            emulation.stale = mode
        answer = self.sim.last
        self.statuses.append(self.sim.status)
        if self.runs_at_decision is None and terminal(self.sim.status):
            self.runs_at_decision = len(self.runs_created())
        return answer

    def settle(self) -> None:
        """Sync until two syncs in a row write nothing (a stale view has caught up by then)."""
        quiet = 0
        for _ in range(16):
            self.sync()
            quiet = 0 if self.wrote else quiet + 1
            if quiet == 2:
                return
        raise AssertionError("the job did not settle")

    def check(self) -> None:
        """A terminal condition is never replaced, restartCount never goes down, and no run object is
        created once the outcome was written."""
        decided: str | None = None
        count = 0
        for i, status in enumerate(self.statuses):
            outcome = terminal(status)
            if decided is not None:
                assert outcome == decided, f"sync {i}: {decided} became {outcome}"
            decided = decided or outcome
            assert status.get("restartCount", 0) >= count, f"sync {i}: restartCount went from {count} to {status.get('restartCount')}"
            count = status.get("restartCount", 0)
        if self.runs_at_decision is not None:
            assert len(self.runs_created()) == self.runs_at_decision, "a pod (or master Job) was created after the outcome"
