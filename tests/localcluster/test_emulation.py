"""The Metacontroller emulation behaves as Metacontroller v4.17.2 and Kubernetes do (docs/localcluster.md):
write order and pace, Go's three-way merge, stale informer reads, retries and resyncs, and the
StatefulSet controller's rolling update under the ChainerJob hook.

The worker template edit and the ChainerJob resync pin failures a real cluster showed against the
hooks before issue 18 (kept as regression tests: each asserts the property that must hold, and
failed on those hooks). The hooks under the stale-read modes are tests/shared/test_stale_reads.py's.
"""
from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest
from helpers import go_apply_merge
from helpers.chainersim import ChainerSim, chainerjob
from helpers.cluster import load_controller_config
from helpers.mcsim import Sim, mxjob
from helpers.objectstore import ObjectBag
from hypothesis import given, settings
from hypothesis import strategies as st

from localcluster.cli.commands import parser as cli_parser
from localcluster.config import parse_composite_controller
from localcluster.controlplane.apistore import ApiStore
from localcluster.controlplane.processes import ControlPlane
from localcluster.metacontroller import LAST_APPLIED, ClientThrottle, Emulation, MetacontrollerStandIn, SyncError, three_way_merge
from localcluster.metacontroller.composite import CUSTOMIZE_TTL_SECONDS
from localcluster.store import ADDED, DELETED, StoreError
from localcluster.types import KubeObject

# --- write order and pace -------------------------------------------------------------------------


def _child(kind: str, api_version: str, name: str, **body: Any) -> dict:
    return {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **body}


def test_children_are_written_one_at_a_time_deletes_first_then_by_group_version_and_kind():
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.apply({"status": {}, "children": [_child("ServiceAccount", "v1", "old-sa")]})
    writes: list[tuple[str, str]] = []

    def record(event: str, obj: KubeObject) -> None:
        if event in (ADDED, DELETED):
            writes.append((event, obj["kind"]))

    sim.store.watch(record)
    # The answer lists them backwards; Metacontroller's order does not depend on the answer's.
    answer = [_child("Job", "batch/v1", "m", spec={"template": {"spec": {"containers": [{"name": "c"}]}}}),
              _child("RoleBinding", "rbac.authorization.k8s.io/v1", "rb", roleRef={}, subjects=[]),
              _child("StatefulSet", "apps/v1", "w", spec={"replicas": 0, "template": {}}),
              _child("Role", "rbac.authorization.k8s.io/v1", "r", rules=[]),
              _child("Service", "v1", "s", spec={"clusterIP": "None"}),
              _child("ConfigMap", "v1", "c", data={})]
    sim.apply({"status": {}, "children": answer})
    assert writes == [(DELETED, "ServiceAccount"), (ADDED, "ConfigMap"), (ADDED, "Service"), (ADDED, "StatefulSet"),
                      (ADDED, "Job"), (ADDED, "Role"), (ADDED, "RoleBinding")]


def test_a_child_created_again_under_its_name_before_its_delete_is_kept_and_the_sync_fails(monkeypatch):
    """A child is deleted with its uid as a precondition, as Metacontroller deletes it: another object of the
    name, created after the sync read its children, is left alone, and the 409 fails the sync (retried)."""
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    sim.apply({"status": {}, "children": [_child("ServiceAccount", "v1", "old-sa")]})
    first_uid = sim.objects("v1", "ServiceAccount")["old-sa"]["metadata"]["uid"]
    delete = sim.store.delete

    def created_again_first(api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None) -> None:
        delete(api_version, kind, namespace, name)
        sim.store.create({"apiVersion": api_version, "kind": kind, "metadata": {"name": name, "namespace": namespace}})
        delete(api_version, kind, namespace, name, uid=uid)

    monkeypatch.setattr(sim.store, "delete", created_again_first)
    with pytest.raises(SyncError, match=r"delete ServiceAccount old-sa: 409 Conflict: Precondition failed"):
        sim.apply({"status": {}, "children": []})
    assert sim.objects("v1", "ServiceAccount")["old-sa"]["metadata"]["uid"] not in (first_uid, None)


def test_an_mxjobs_pods_are_created_before_their_services():
    sim = Sim(mxjob())
    sim.sync()
    kinds = [entry.split("/")[0] for entry in sim.created]
    assert kinds == ["ConfigMap"] + ["Pod"] * 4 + ["Service"] * 4


def test_the_client_throttle_lets_a_burst_through_then_paces_at_qps():
    throttle = ClientThrottle(qps=20.0, burst=3)
    start = time.monotonic()
    for _ in range(3):
        throttle.take()
    assert time.monotonic() - start < 0.05  # the burst
    for _ in range(4):
        throttle.take()
    assert time.monotonic() - start >= 4 / 20.0 - 0.01  # then 20 a second


def test_the_default_client_rate_is_metacontrollers():
    throttle = ClientThrottle()
    assert (throttle.qps, throttle.burst) == (5.0, 10)


# --- Go's three-way merge ---------------------------------------------------------------------------

_keys = st.sampled_from(["name", "port", "containerPort", "protocol", "value", "image"])
_scalars = st.one_of(st.integers(0, 3), st.sampled_from(["a", "b", "0", "1"]), st.booleans(), st.none())
_json = st.recursive(
    _scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(_keys, children, max_size=4)),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(observed=st.dictionaries(_keys, _json, max_size=4), last=st.dictionaries(_keys, _json, max_size=4),
       desired=st.dictionaries(_keys, _json, max_size=4))
def test_the_merge_agrees_with_a_port_of_go_apply_merge(observed, last, desired):
    before = copy.deepcopy((observed, last, desired))
    assert three_way_merge(observed, last, desired) == go_apply_merge.Merge(observed, last, desired)
    assert (observed, last, desired) == before  # inputs untouched


def test_a_port_on_tcp_and_udp_merges_into_two_identical_entries_as_go_does():
    ports = [{"name": "dns-tcp", "port": 53, "protocol": "TCP"}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}]
    merged = three_way_merge({"ports": ports}, {"ports": ports}, {"ports": ports})
    assert merged["ports"] == [ports[1], ports[1]]  # keyed by port alone: the last wins, written back twice


@pytest.mark.apiserver
def test_a_duplicate_port_service_cannot_be_updated_and_every_sync_fails_with_the_api_servers_422(
        cluster_plane: ControlPlane, namespace: str):
    """Created with two distinct (port, protocol) pairs, the Service is fine; the merge of the next sync
    keys its ports by port alone, so the update the emulation sends is the real server's 422 on every
    sync, and the parent's status is written all the same."""
    ports = [{"name": "dns-tcp", "port": 53, "protocol": "TCP"}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mx-worker-0"},
               "spec": {"clusterIP": "None", "ports": ports, "selector": {"app": "mx"}}}
    syncs = iter(range(1, 100))

    def hook(request: Any) -> dict:
        return {"status": {"restartCount": next(syncs)}, "children": [service]}

    job = cast(KubeObject, mxjob(replicas={"Worker": 1}))
    job["metadata"] = {"name": "mx", "namespace": namespace}
    store = ApiStore(cluster_plane.kubeconfig, [("kubeflow.org/v1", "MXJob"), ("v1", "Service")])
    store.start()
    try:
        emulation = Emulation(store, load_controller_config(parent_kind="MXJob"), hook)
        uid = emulation.track(store.create(job))
        emulation.sync(uid)  # created fine: two distinct pairs
        _wait(lambda: store.list_shared("v1", "Service", namespace))  # in the informer's cache, as the next sync reads it
        assert len(store.get("v1", "Service", namespace, "mx-worker-0")["spec"]["ports"]) == 2  # type: ignore[index]
        for attempt in (2, 3):
            with pytest.raises(SyncError, match=r"422.*Duplicate value"):
                emulation.sync(uid)
            assert store.get("kubeflow.org/v1", "MXJob", namespace, "mx")["status"]["restartCount"] == attempt  # type: ignore[index]
        assert len(store.get("v1", "Service", namespace, "mx-worker-0")["spec"]["ports"]) == 2  # type: ignore[index]
    finally:
        store.stop()


def _wait(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {check}")


# --- stale reads --------------------------------------------------------------------------------------


def test_a_stale_parent_is_one_status_write_behind_its_children():
    seen: list[Any] = []
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    config = load_controller_config(parent_kind="MXJob")
    answers = iter([{"status": {"n": 1}}, {"status": {"n": 2}}, {"status": {"n": 2}}, {"status": {"n": 2}}])

    def hook(request: Any) -> dict:
        seen.append(request["parent"].get("status", {}).get("n"))
        return next(answers)

    emulation = Emulation(store, config, hook, stale="parent")
    uid = emulation.track(parent)
    for _ in range(4):
        emulation.sync(uid)
    assert seen == [None, None, 1, 2]  # each sync after a write sees the status before it; then it catches up


# --- retries and resyncs ------------------------------------------------------------------------------


class _FakeHooks:
    """Hooks over HTTP on a free loopback port: `answer(path, request)` gives the HTTP status and the body."""

    def __init__(self) -> None:
        hooks = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                code, answer = hooks.answer(self.path, request)
                body = json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, path: str, request: dict) -> tuple[int, dict]:
        raise NotImplementedError


class _Hook(_FakeHooks):
    """A sync hook over HTTP that answers 500 while `down`; it records when each call came."""

    def __init__(self) -> None:
        self.down = True
        self.calls: list[float] = []
        super().__init__()

    def answer(self, path: str, request: dict) -> tuple[int, dict]:
        self.calls.append(time.monotonic())
        return (500, {"error": "down"}) if self.down else (200, {"status": {"ok": True}, "children": []})


@contextmanager
def _outage(kind: str, job: dict, scale: float) -> Iterator[tuple[_Hook, MetacontrollerStandIn]]:
    hook = _Hook()
    store = ObjectBag()
    store.create(cast(KubeObject, job), restore=True)
    controller = MetacontrollerStandIn(store, load_controller_config(parent_kind=kind), hook.url, time_scale=scale)
    controller.start()
    try:
        yield hook, controller
    finally:
        controller.stop()
        hook.server.shutdown()


def _quiet_wait_after_outage(kind: str, job: dict) -> float:
    """Seconds (on Metacontroller's clock) a quiet parent waits for a sync after a 950 s hooks outage."""
    scale = 200.0  # 1 s here is 200 s for Metacontroller's timers; the rule is unchanged
    with _outage(kind, job, scale) as (hook, _):
        time.sleep(950 / scale)  # retries at 5 ms·(2ⁿ-1): the 17th near 655 s, the 18th near 1,310 s
        hook.down = False
        up = time.monotonic()
        _wait(lambda: any(t > up for t in hook.calls), timeout=8.0)
        return (min(t for t in hook.calls if t > up) - up) * scale


def test_retries_back_off_from_5ms_doubling_up_to_1000s():
    controller = MetacontrollerStandIn(ObjectBag(), load_controller_config(parent_kind="MXJob"), "http://127.0.0.1:9")
    assert [controller.retry_delay(n) for n in (1, 2, 3, 11)] == [0.005, 0.01, 0.02, 5.12]
    assert controller.retry_delay(18) == 655.36 and controller.retry_delay(19) == controller.retry_delay(60) == 1000.0


def test_after_a_hooks_outage_a_quiet_mxjob_is_synced_within_its_resync_period():
    assert _quiet_wait_after_outage("MXJob", mxjob()) <= 300 + 20


def test_after_a_hooks_outage_a_quiet_chainerjob_is_synced_within_300s():
    assert _quiet_wait_after_outage("ChainerJob", chainerjob()) <= 300 + 20


def test_resync_period_is_read_from_each_shipped_controller():
    assert load_controller_config(parent_kind="MXJob").resync_period_seconds == 300
    raw = copy.deepcopy(load_controller_config(parent_kind="ChainerJob").raw)
    raw["spec"]["resyncPeriodSeconds"] = 120
    assert parse_composite_controller(raw, "edited").resync_period_seconds == 120


def test_the_cli_takes_metacontrollers_client_rate_and_the_stale_read_mode(capsys):
    args = cli_parser().parse_args(["run", "job.yaml", "--client-qps", "50", "--client-burst", "20", "--stale-reads", "parent"])
    assert (args.client_qps, args.client_burst, args.stale_reads) == (50.0, 20, "parent")
    defaults = cli_parser().parse_args(["run", "job.yaml"])
    assert (defaults.client_qps, defaults.client_burst, defaults.stale_reads) == (5.0, 10, None)
    with pytest.raises(SystemExit):
        cli_parser().parse_args(["run", "job.yaml", "--client-qps", "0"])
    assert "--client-qps: must be a number above 0" in capsys.readouterr().err


def _conflicting_status_writes(sim: ChainerSim, conflicts: int) -> list[int]:
    """Make the sim's store answer 409 to its next `conflicts` status writes; the attempts made, as a list."""
    attempts: list[int] = []
    real = sim.store.update_status

    def update_status(*args: Any, **kwargs: Any) -> bool:
        attempts.append(kwargs.get("attempts", 10))
        if len(attempts) <= conflicts:
            raise StoreError(409, "Conflict", "the object has been modified; please apply your changes to the latest version")
        return real(*args, **kwargs)

    sim.store.update_status = update_status  # type: ignore[method-assign]
    return attempts


@pytest.mark.parametrize(("conflicts", "written"), [(3, True), (4, False)], ids=["written-on-the-4th-try", "dropped-after-4"])
def test_a_conflicting_status_write_is_tried_4_times_then_dropped_without_failing_the_sync(conflicts, written):
    """As AtomicStatusUpdate under RetryOnConflict(DefaultBackoff): a fresh GET and a PUT, 4 times;
    a conflict left after that is not a sync error (Metacontroller syncs again on the change that caused it)."""
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    attempts = _conflicting_status_writes(sim, conflicts)
    sim.apply({"status": {"note": "new"}, "children": []})
    assert attempts == [1] * min(conflicts + 1, 4)  # one PUT per try, each over its own fresh read
    assert (sim.parent.get("status", {}).get("note") == "new") is written
    assert sim.emulation.last_error(sim.uid) is None


# --- related objects (the customize hook) --------------------------------------------------------------


def _settled(count: Any, quiet: float = 0.5, timeout: float = 5.0) -> int:
    """A count once it has not changed for `quiet` seconds."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.02)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            return int(last)
    raise AssertionError("the count never settled")


class _RelatingHook(_FakeHooks):
    """Customize and sync hooks over HTTP: customize relates the pods labelled role=master; sync
    records the related pods each request carried and answers no children."""

    def __init__(self) -> None:
        self.customize_calls = 0
        self.related: list[dict] = []
        super().__init__()

    def answer(self, path: str, request: dict) -> tuple[int, dict]:
        if path.endswith("/customize"):
            self.customize_calls += 1
            return 200, {"relatedResources": [{"apiVersion": "v1", "resource": "pods",
                                               "labelSelector": {"matchLabels": {"role": "master"}}}]}
        self.related.append(request["related"])
        return 200, {"status": {}, "children": []}


def test_a_change_of_a_related_pod_syncs_its_parent_at_once_with_the_pod_in_related():
    hook = _RelatingHook()
    store = ObjectBag()
    job = chainerjob()
    store.create(cast(KubeObject, job), restore=True)
    config = load_controller_config(parent_kind="ChainerJob")
    assert config.customize_path == "/chainerjob/customize"
    controller = MetacontrollerStandIn(store, config, hook.url)
    controller.start()
    try:
        _wait(lambda: len(hook.related) >= 1, timeout=5.0)
        assert hook.related[0] == {"Pod.v1": {}}  # the rule's type is there even when nothing matches
        seen = _settled(lambda: len(hook.related))  # the first status write brings one more sync

        def pod(name: str, labels: dict, namespace: str = "ns") -> KubeObject:
            return cast(KubeObject, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": name, "namespace": namespace, "labels": labels}, "spec": {"containers": [{"name": "c"}]}})

        store.create(pod("unrelated", {"role": "worker"}))
        store.create(pod("elsewhere", {"role": "master"}, namespace="other"))
        time.sleep(0.3)
        assert len(hook.related) == seen  # neither is this parent's
        store.create(pod("chj-master-x", {"role": "master"}))
        _wait(lambda: len(hook.related) > seen, timeout=5.0)
        assert list(hook.related[-1]["Pod.v1"]) == ["chj-master-x"]
        seen = len(hook.related)
        store.update_status("v1", "Pod", "ns", "chj-master-x", {"phase": "Failed"})
        _wait(lambda: len(hook.related) > seen and hook.related[-1]["Pod.v1"]["chj-master-x"].get("status"), timeout=5.0)
        assert hook.related[-1]["Pod.v1"]["chj-master-x"]["status"] == {"phase": "Failed"}
        seen = len(hook.related)
        store.remove("v1", "Pod", "ns", "chj-master-x")
        _wait(lambda: len(hook.related) > seen and hook.related[-1] == {"Pod.v1": {}}, timeout=5.0)
        assert hook.customize_calls == 1  # one answer per parent generation, as Metacontroller caches it
    finally:
        controller.stop()
        hook.server.shutdown()


@pytest.mark.parametrize(("later", "asked_again"), [(0.0, False), (CUSTOMIZE_TTL_SECONDS, False), (CUSTOMIZE_TTL_SECONDS + 1, True)],
                         ids=["at-once-kept", "at-20-minutes-kept", "after-20-minutes-asked-again"])
def test_a_customize_answer_is_kept_20_minutes_for_one_generation_then_asked_again(later: float, asked_again: bool):
    """As v4.17.2's customize cache (uid and generation, expiring 20 minutes after the answer): the
    same generation synced again within them reuses the answer, after them asks the hook again."""
    sim = ChainerSim(chainerjob(workers={"ws": 1}))
    now = [1000.0]
    sim.emulation.clock = lambda: now[0]
    sim.sync()
    asked = sim.customize_calls
    now[0] += later
    sim.sync()
    assert sim.customize_calls == asked + asked_again


# --- the parent is read from the informer's cache -----------------------------------------------------


class _HeldWatch:
    """A store whose watch events wait until `release()`: an informer as far behind as a test wants.
    It counts the GETs of each kind (the emulation's only fresh reads)."""

    def __init__(self, store: ObjectBag) -> None:
        self._store = store
        self._watchers: list[Any] = []
        self.holding = False
        self.held: list[tuple[str, KubeObject]] = []
        self.gets: dict[str, int] = {}
        store.watch(self._on_event)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def watch(self, watcher: Any) -> None:
        self._watchers.append(watcher)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        self.gets[kind] = self.gets.get(kind, 0) + 1
        return self._store.get(api_version, kind, namespace, name)

    def _on_event(self, event: str, obj: KubeObject) -> None:
        if self.holding:
            self.held.append((event, obj))
            return
        for watcher in self._watchers:
            watcher(event, obj)

    def release(self) -> None:
        self.holding = False
        held, self.held = self.held, []
        for event, obj in held:
            self._on_event(event, obj)


def _status_counter(seen: list[Any]) -> Any:
    """A sync hook that records the status and spec it was shown and answers {n: how many calls so far}."""

    def hook(request: Any) -> dict:
        seen.append((request["parent"].get("status", {}).get("n"), request["parent"]["spec"].get("runPolicy")))
        return {"status": {"n": len(seen)}, "children": []}

    return hook


def test_a_sync_reads_its_parent_from_the_watch_fed_cache_however_far_behind_it_is():
    """Metacontroller reads the parent from its informer: three status writes and a spec edit behind,
    the hook is shown the parent as the last delivered event had it; the status is still written
    over a fresh read (the only GET), and once the events arrive the hook sees them all."""
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    held = _HeldWatch(store)
    seen: list[Any] = []
    emulation = Emulation(held, load_controller_config(parent_kind="MXJob"), _status_counter(seen))
    uid = emulation.track(parent)
    held.holding = True
    edited = store.get("kubeflow.org/v1", "MXJob", "ns", "mx")
    assert edited is not None
    edited["spec"]["runPolicy"] = {"backoffLimit": 2}
    store.update(edited)
    for _ in range(3):
        emulation.sync(uid)
    assert seen == [(None, None)] * 3  # the cache has neither our status writes nor the edit
    assert store.get("kubeflow.org/v1", "MXJob", "ns", "mx")["status"]["n"] == 3  # type: ignore[index]
    assert held.gets == {"MXJob": 3}  # one fresh read per sync: the status write's, never one to read the parent
    held.release()
    emulation.sync(uid)
    assert seen[-1] == (3, {"backoffLimit": 2})


def test_a_parent_the_cache_no_longer_has_is_not_synced():
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    seen: list[Any] = []
    emulation = Emulation(store, load_controller_config(parent_kind="MXJob"), _status_counter(seen))
    uid = emulation.track(parent)
    store.delete("kubeflow.org/v1", "MXJob", "ns", "mx")
    assert emulation.sync(uid) is False and seen == []


class _CountingThrottle(ClientThrottle):
    def __init__(self) -> None:
        super().__init__(qps=1000.0, burst=1000)
        self.tokens = 0

    def take(self) -> None:
        self.tokens += 1
        super().take()


class _CountingStore(_HeldWatch):
    """Counts the API requests each call makes on a real server (ApiStore: update_status given the
    object just read only PUTs)."""

    def __init__(self, store: ObjectBag) -> None:
        super().__init__(store)
        self.requests = 0

    def get(self, *args: Any) -> KubeObject | None:
        self.requests += 1
        return super().get(*args)

    def create(self, obj: KubeObject, **kwargs: Any) -> KubeObject:
        self.requests += 1
        return self._store.create(obj, **kwargs)

    def update(self, obj: KubeObject) -> KubeObject:
        self.requests += 1
        return self._store.update(obj)

    def update_status(self, *args: Any, current: KubeObject | None = None, attempts: int = 10) -> bool:
        self.requests += 1 if current is not None else 2
        return self._store.update_status(*args, current=current, attempts=attempts)

    def delete(self, *args: Any, uid: str | None = None) -> None:
        self.requests += 1
        self._store.delete(*args, uid=uid)


def test_every_api_request_of_a_sync_takes_a_token_of_the_client_throttle():
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    counting = _CountingStore(store)
    throttle = _CountingThrottle()
    def service(name: str, **labels: str) -> dict:
        return {**_child("Service", "v1", name, spec={"clusterIP": "None"}), "metadata": {"name": name, "labels": labels}}

    answers = iter([
        {"status": {"a": 1}, "children": [service("one"), service("two")]},
        {"status": {"a": 2}, "children": [service("one", edited="yes")]},  # an InPlace update and a delete
        {"status": {"a": 2}, "children": [service("one", edited="yes")]},  # nothing to write
    ])
    emulation = Emulation(counting, load_controller_config(parent_kind="MXJob"), lambda request: next(answers), throttle=throttle)
    uid = emulation.track(parent)
    for _ in range(3):
        emulation.sync(uid)
    services = store.list_shared("v1", "Service", "ns")
    assert [(s["metadata"]["name"], s["metadata"]["labels"].get("edited")) for s in services] == [("one", "yes")]
    assert counting.requests == throttle.tokens > 0


# --- a failed sync of any kind is retried, and the worker goes on ---------------------------------------


class _Flaky(_HeldWatch):
    """A store whose first `failures` status reads fail as a proxy's 502 page would (not JSON: a
    ValueError out of the client, not an API error)."""

    def __init__(self, store: ObjectBag, failures: int) -> None:
        super().__init__(store)
        self.failures = failures

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> KubeObject | None:
        if kind == "MXJob" and self.failures > 0:
            self.failures -= 1
            raise ValueError("Expecting value: line 1 column 1 (char 0)")
        return super().get(api_version, kind, namespace, name)


class _Answering(_FakeHooks):
    def __init__(self, answer: dict) -> None:
        self.body = answer
        super().__init__()

    def answer(self, path: str, request: dict) -> tuple[int, dict]:
        return 200, self.body


def test_an_exception_that_is_not_a_sync_error_is_retried_with_backoff_and_the_worker_goes_on():
    hook = _Answering({"status": {"done": True}, "children": []})
    store = ObjectBag()
    store.create(cast(KubeObject, mxjob()), restore=True)
    flaky = _Flaky(store, failures=3)
    controller = MetacontrollerStandIn(flaky, load_controller_config(parent_kind="MXJob"), hook.url, workers=1, time_scale=10.0)
    controller.start()
    try:
        _wait(lambda: (store.get("kubeflow.org/v1", "MXJob", "ns", "mx") or {}).get("status", {}).get("done"), timeout=10.0)
        errors = [e for e in controller.events if e.reason == "SyncError"]
        assert len(errors) == 3 and all("ValueError" in e.message for e in errors)
        assert controller.alive_workers() == 1
    finally:
        controller.stop()
        hook.server.shutdown()


def test_an_unreadable_last_applied_annotation_fails_the_sync_until_it_is_mended():
    hook = _Answering({"status": {}, "children": [_child("ConfigMap", "v1", "cm", data={"k": "v"})]})
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    controller = MetacontrollerStandIn(store, load_controller_config(parent_kind="MXJob"), hook.url, workers=1, time_scale=10.0)
    controller.start()
    try:
        uid = parent["metadata"]["uid"]
        _wait(lambda: store.get("v1", "ConfigMap", "ns", "cm"))
        _wait(lambda: controller.syncs(uid) >= 1)
        child = store.get("v1", "ConfigMap", "ns", "cm")
        assert child is not None
        good = child["metadata"]["annotations"][LAST_APPLIED]
        child["metadata"]["annotations"][LAST_APPLIED] = "{not json"
        store.update(child)  # someone edits the annotation by hand: the next sync cannot merge
        _wait(lambda: controller.last_error(uid))
        assert "last-applied-configuration annotation is not JSON" in (controller.last_error(uid) or "")
        mended = store.get("v1", "ConfigMap", "ns", "cm")
        assert mended is not None
        mended["metadata"]["annotations"][LAST_APPLIED] = good
        store.update(mended)
        _wait(lambda: controller.last_error(uid) is None)  # retried with backoff, by the same worker
        assert controller.alive_workers() == 1
    finally:
        controller.stop()
        hook.server.shutdown()


def test_every_parent_is_synced_again_at_each_flush_of_the_informer_caches():
    """--cache-flush-interval (30 minutes): every parent, with or without resyncPeriodSeconds."""
    hook = _Answering({"status": {}, "children": []})
    store = ObjectBag()
    parent = store.create(cast(KubeObject, mxjob()), restore=True)
    config = load_controller_config(parent_kind="MXJob")
    assert config.resync_period_seconds == 300
    without = parse_composite_controller({**config.raw, "spec": {**config.raw["spec"], "resyncPeriodSeconds": None}}, "no-resync")
    assert without.resync_period_seconds is None
    controller = MetacontrollerStandIn(store, without, hook.url, time_scale=1800 / 0.5)  # 30 minutes in 0.5 s
    controller.start()
    try:
        uid = parent["metadata"]["uid"]
        _wait(lambda: controller.syncs(uid) >= 1)
        settled = _settled(lambda: controller.syncs(uid), quiet=0.1)
        _wait(lambda: controller.syncs(uid) >= settled + 2, timeout=3.0)
    finally:
        controller.stop()
        hook.server.shutdown()
