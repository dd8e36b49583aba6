"""Scenario tests of the pure sync, stepped by hand over the local cluster's Metacontroller emulation.

There is one Metacontroller in this project (`localcluster.metacontroller.Emulation`); this module
only steps it: `Stepped` holds a plain object store (objectstore.py) and the emulation of the shipped
CompositeController (or one a test gives), calls the hook in-process with an explicit clock, and
lets a test play kubelet and users (pod phases, edits, deletions). `Sim` is the MXJob scene;
tests/helpers/chainersim.py the ChainerJob one. What differs from a real cluster is the emulation's, listed
in docs/localcluster.md; the write pace is not throttled here (no client rate: nothing waits).
"""
from __future__ import annotations

import copy
import difflib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from helpers import yamlio
from helpers.objectstore import ObjectBag
from hooks.mxjob.sync import customize_mxjob, sync_mxjob
from hooks.shared.conditions import rfc3339
from hooks.shared.memory import ATTEMPT_INFIX, OUTCOME_SUFFIX, RESTART_INFIX
from localcluster.config import parse_composite_controller
from localcluster.metacontroller import Emulation, Stale
from localcluster.store import ADDED, DELETED

T0 = datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)
MANIFESTS = Path(__file__).resolve().parents[2] / "metacontroller"
MXJOB_CONTROLLER = MANIFESTS / "compositecontroller.yaml"


def canonical(value: Any) -> str:
    """A JSON value as text with sorted keys, one item a line, so two answers compare (and diff) byte for byte."""
    return json.dumps(value, sort_keys=True, indent=1)


def diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), "answer", "synced again"))


@dataclass(frozen=True)
class Handoff:
    """What one step wrote that the hook reads back on the next sync, which that write triggers.

    Each is a documented multi-step of the lifecycle (docs/lifecycle.md, "Restarts" and "Why the
    outcome is recorded in a child"; docs/gang-scheduling.md), and lets the next sync answer other
    children:
    - a memory record created (`<job>-outcome`, `<pod>-restart-<n>`, `<job>-attempt-<n>`): the sync
      that observes it applies cleanPodPolicy, leaves the failed pod out, or starts the new attempt;
    - a child deleted: the next sync may create it again, or the next attempt once the old is gone;
    - a PodGroup created: what makes pods waits until it is observed (hooks.shared.gang), so the next
      sync adds them, and its status stops saying it waits;
    - a ServiceAccount created (progress reporting): the same, for the job's pods that use it.
    """

    record: bool = False
    podgroup: bool = False
    deleted: tuple[str, ...] = ()
    account: bool = False

    def __bool__(self) -> bool:
        return self.record or self.podgroup or bool(self.deleted) or self.account

    @classmethod
    def of(cls, created: list[str], deleted: list[str]) -> Handoff:
        """From the `created` and `deleted` entries of one step (`<kind or key>/<name>`)."""
        def kind_and_name(entry: str) -> tuple[str, str]:
            label, _, name = entry.rpartition("/")  # a key holds the group's slash: PodGroup.scheduling.volcano.sh/v1beta1
            return label.partition(".")[0], name

        made = [kind_and_name(entry) for entry in created]
        return cls(record=any(kind == "ConfigMap" and is_record(name) for kind, name in made),
                   podgroup=any(kind == "PodGroup" for kind, _ in made), deleted=tuple(deleted),
                   account=any(kind == "ServiceAccount" and name.endswith("-progress") for kind, name in made))


def is_record(name: str) -> bool:
    """Whether a ConfigMap of that name is a memory record (hooks.shared.memory names them)."""
    return name.endswith(OUTCOME_SUFFIX) or RESTART_INFIX in name or ATTEMPT_INFIX in name


def mxjob(name: str = "mx", *, replicas: dict | None = None, **spec) -> dict:
    """An MXJob with one-container templates; replicas maps type -> count or full replica spec."""
    replicas = replicas or {"Scheduler": 1, "Server": 1, "Worker": 2}
    specs = {}
    for rtype, value in replicas.items():
        entry = value if isinstance(value, dict) else {"replicas": value}
        entry.setdefault("template", {"spec": {"containers": [
            {"name": "mxnet", "image": "mxjob/mxnet:1.9.1", "command": ["python", "train.py"]}]}})
        specs[rtype] = entry
    return {"apiVersion": "kubeflow.org/v1", "kind": "MXJob",
            "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1},
            "spec": {"mxReplicaSpecs": specs, **spec}}


def with_podgroups(controller_file: Path, api_version: str, scheduler_name: str | None = None) -> dict:
    """A shipped CompositeController with the podgroups rule a gang component adds (and its annotation)."""
    controller = yamlio.load(controller_file.read_text())
    controller["spec"]["childResources"].append(
        {"apiVersion": api_version, "resource": "podgroups", "updateStrategy": {"method": "InPlace"}})
    if scheduler_name is not None:
        controller["metadata"]["annotations"] = {"scheduling.kubeflow.org/scheduler-name": scheduler_name}
    return controller


def gang_controller(api_version: str, scheduler_name: str | None = None) -> dict:
    """The shipped mxjob-controller with a gang component's podgroups rule."""
    return with_podgroups(MXJOB_CONTROLLER, api_version, scheduler_name)


class Stepped:
    """One parent in a store, synced by the emulation one step at a time; the hook runs in-process."""

    def __init__(self, parent: Any, hook: Callable[..., Any], default_controller: Path, *, now: datetime,
                 controller: dict | None, stale: Stale | None, settings: dict[str, Any],
                 customize: Callable[[Any], Any] | None = None):
        raw = copy.deepcopy(controller) if controller else yamlio.load(default_controller.read_text())
        self.controller = raw
        self.config = parse_composite_controller(raw, "scenario")
        uids = itertools.count(1)
        self.store = ObjectBag(new_uid=lambda: f"u{next(uids)}", now=lambda: rfc3339(self.now))
        self.now: datetime = now
        self.last: dict = {}
        self.settings = settings
        self._hook = hook
        self._customize = customize  # the kind's customize hook, called when the controller declares one
        self.customize_calls = 0
        self._answer: Any = None
        self._hook_called = False  # whether the last sync called the hook (not an answer a test wrote)
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.store.watch(self._record)
        self.namespace, self.name = parent["metadata"]["namespace"], parent["metadata"]["name"]
        self.uid = self.store.create(copy.deepcopy(parent), restore=True)["metadata"]["uid"]
        self.emulation = Emulation(self.store, self.config, self._call, stale=stale, order_seed=0,
                                   customize=self._call_customize)
        self.emulation.track(self.parent)

    def use_controller(self, controller: dict) -> None:
        """Install another CompositeController (a gang component, say): as in Metacontroller, whose
        controller for a parent restarts with the new spec, the emulation is rebuilt over the same store."""
        self.controller = copy.deepcopy(controller)
        self.config = parse_composite_controller(self.controller, "scenario")
        self.emulation = Emulation(self.store, self.config, self._call, stale=self.emulation.stale, order_seed=0,
                                   customize=self._call_customize)
        self.emulation.track(self.parent)

    def _record(self, event: str, obj: Any) -> None:
        if self.config.rule_for(obj.get("apiVersion", ""), obj.get("kind", "")) is None:
            return
        name = f"{self.label(obj)}/{obj['metadata']['name']}"
        if event == ADDED:
            self.created.append(name)
        elif event == DELETED:
            self.deleted.append(name)

    def label(self, obj: Any) -> str:
        """How `created` and `deleted` name an object's type."""
        return str(obj["kind"])

    def _call(self, request: Any) -> Any:
        answer = self._answer if self._answer is not None else self._hook(request, now=self.now, **self.settings)
        self.last = answer
        self._hook_called = self._answer is None
        return answer

    def _call_customize(self, request: Any) -> Any:
        if self._customize is None:
            raise AssertionError("the controller declares a customize hook, but the scenario has none")
        self.customize_calls += 1
        return self._customize(request)

    # --- Metacontroller ------------------------------------------------------------------------

    def request(self) -> dict:
        """The sync request the emulation would send now."""
        parent: Any = self.parent
        return dict(self.emulation.build_request(parent, self.emulation.claim_children(parent),
                                                 self.emulation.related_objects(parent)))

    def sync(self) -> dict:
        """Call the hook, apply its answer, and check that the answer is a fixed point of what it produced
        (`assert_fixed_point`): every scenario step of every kind checks it."""
        self._answer = None
        self._hook_called = False
        created, deleted = len(self.created), len(self.deleted)
        self.emulation.sync(self.uid)
        if self._hook_called:
            self.assert_fixed_point(Handoff.of(self.created[created:], self.deleted[deleted:]))
        return self.last

    def assert_fixed_point(self, handoff: Handoff) -> None:
        """Sync again, without applying, on what the last answer produced: the status must come out
        byte-identical and no child may change (Metacontroller syncs again after every write, so an
        answer that changes when it sees its own result is a hot loop).

        A step that wrote a child the hook reads back hands off to the sync that write triggers, which
        may answer other children (`Handoff`); the status stays byte-identical all the same, but for
        the wait on a PodGroup and a TTL stamped once the outcome record is observed."""
        again = self._hook(self.request(), now=self.now, **self.settings)
        if not (handoff.podgroup or handoff.account):
            before, after = canonical(self.last.get("status")), canonical(again.get("status"))
            if handoff.record and "cleanedUpTime" not in (self.last.get("status") or {}):
                # A TTL already run out when the job ends is carried out, and stamped, by the sync
                # that observes the outcome record (cleanup waits for it: docs/lifecycle.md).
                after = canonical({k: v for k, v in (again.get("status") or {}).items() if k != "cleanedUpTime"})
            assert after == before, f"not a fixed point: syncing again changes the status ({handoff})\n" + diff(before, after)
        if not handoff:
            before, after = canonical(self.last.get("children")), canonical(again.get("children"))
            assert after == before, "not a fixed point: syncing again changes the children\n" + diff(before, after)

    def apply(self, answer: dict) -> None:
        """Apply an answer a test wrote, as Metacontroller applies the hook's."""
        self._answer = answer
        try:
            self.emulation.sync(self.uid)
        finally:
            self._answer = None

    # --- the API, for tests playing kubelet, controllers and users ------------------------------

    @property
    def parent(self) -> Any:
        """The parent as stored now."""
        stored = self.store.get(self.config.parent_api_version, self.config.parent_kind, self.namespace, self.name)
        assert stored is not None
        return stored

    def objects(self, api_version: str, kind: str) -> dict[str, Any]:
        """Copies of the stored objects of one type, by name."""
        return {o["metadata"]["name"]: o for o in self.store.list(api_version, kind, self.namespace)}

    def change(self, api_version: str, kind: str, name: str, edit: Callable[[dict], None]) -> None:
        """Someone edits an object (not its status) with `edit`."""
        obj: Any = self.store.get(api_version, kind, self.namespace, name)
        assert obj is not None, f"no {kind} {name}"
        edit(obj)
        self.store.update(obj)

    def write_status(self, api_version: str, kind: str, name: str, status: dict) -> None:
        """A controller (or the kubelet) reports an object's status."""
        self.store.update_status(api_version, kind, self.namespace, name, status)

    def create(self, obj: dict) -> None:
        """Someone creates an object in the job's namespace, labelled as the job's child (so it is claimed)."""
        obj = copy.deepcopy(obj)
        obj["metadata"]["namespace"] = self.namespace
        obj["metadata"].setdefault("labels", {})["controller-uid"] = self.uid
        self.store.create(obj)

    def set_parent_status(self, status: dict) -> None:
        """The parent's status as if an earlier sync had written it."""
        self.write_status(self.config.parent_api_version, self.config.parent_kind, self.name, status)

    def remove(self, api_version: str, kind: str, name: str) -> None:
        """The object disappears without the operator asking (garbage collection, kubectl delete)."""
        self.store.remove(api_version, kind, self.namespace, name)

    def edit(self, spec_update: dict) -> None:
        """A user edit of the spec: the API server moves generation on."""
        self.change(self.config.parent_api_version, self.config.parent_kind, self.name,
                    lambda parent: parent["spec"].update(spec_update))

    def tick(self, seconds: float) -> None:
        """Time passes."""
        self.now += timedelta(seconds=seconds)

    @property
    def status(self) -> dict:
        """The parent's status as last written."""
        return self.parent.get("status", {})

    def state(self) -> str:
        """What `kubectl get` shows in the State column."""
        conds = self.status.get("conditions") or []
        return conds[-1]["type"] if conds else ""

    def condition(self, ctype: str) -> dict | None:
        """One condition by type."""
        return next((c for c in self.status.get("conditions", []) if c["type"] == ctype), None)


class Sim(Stepped):
    """One MXJob and its children, synced step by step."""

    def __init__(self, parent: Any, now: datetime = T0, controller: dict | None = None, *, stale: Stale | None = None,
                 settings: dict[str, Any] | None = None):
        settings = settings or {}
        super().__init__(parent, sync_mxjob, MXJOB_CONTROLLER, now=now, controller=controller, stale=stale,
                         settings=settings, customize=lambda request: customize_mxjob(request, **settings))

    @property
    def pods(self) -> dict[str, dict]:
        return self.objects("v1", "Pod")

    @property
    def services(self) -> dict[str, dict]:
        return self.objects("v1", "Service")

    @property
    def config_maps(self) -> dict[str, dict]:
        return self.objects("v1", "ConfigMap")

    @property
    def podgroups(self) -> dict[str, dict]:
        return {name: obj for rule in self.config.children if rule["kind"] == "PodGroup"
                for name, obj in self.objects(rule["apiVersion"], "PodGroup").items()}

    @property
    def podgroup_key(self) -> str | None:
        """The children key of the controller's PodGroup rule, if it declares one."""
        return next((self.config.child_key(rule) for rule in self.config.children if rule["kind"] == "PodGroup"), None)

    # --- kubelet and users -----------------------------------------------------------------

    def run(self, *names: str) -> None:
        """Pods start running (all pods when no name is given)."""
        for name in names or list(self.pods):
            self.set_phase(name, "Running")

    def set_phase(self, name: str, phase: str, *, exit_code: int | None = None,
                  restarts: int = 0, last_exit_code: int | None = None, reason: str | None = None,
                  message: str | None = None, pod_reason: str | None = None) -> None:
        """Report a pod phase with the mxnet container's state (and last state), as the kubelet does.

        `reason` and `message` go on the terminated state (the last one when only a last exit code
        is given); `pod_reason` on the pod (Evicted, DeadlineExceeded)."""
        # The kubelet stamps when the container started running; the Running condition is stamped with it.
        state: dict = {"running": {"startedAt": rfc3339(self.now)}} if phase == "Running" else {}
        extra = {k: v for k, v in (("reason", reason), ("message", message)) if v is not None}
        if exit_code is not None:
            # The kubelet stamps every terminated state; the success grace counts from it.
            state = {"terminated": {"exitCode": exit_code, "finishedAt": rfc3339(self.now), **extra}}
        container: dict = {"name": "mxnet", "restartCount": restarts, "state": state}
        if last_exit_code is not None:
            container["lastState"] = {"terminated": {"exitCode": last_exit_code,
                                                     **(extra if exit_code is None else {})}}
        status: dict = {"phase": phase, "containerStatuses": [container]}
        if pod_reason is not None:
            status["reason"] = pod_reason
        self.write_status("v1", "Pod", name, status)

    def terminating(self, name: str) -> None:
        """The pod is being deleted by someone else: bound to a node, it stays until its containers stop."""
        self.change("v1", "Pod", name, lambda pod: pod["spec"].update(nodeName="node-1"))
        self.store.delete("v1", "Pod", self.namespace, name)

    def gc(self, name: str) -> None:
        """The pod disappears without the operator asking (garbage collection, kubectl delete)."""
        self.remove("v1", "Pod", name)


def running(parent: dict | None = None) -> Sim:
    """A scene of `parent` (mxjob()'s default job) synced once, its pods running, and synced again."""
    sim = Sim(parent or mxjob())
    sim.sync()
    sim.run()
    sim.sync()
    return sim
