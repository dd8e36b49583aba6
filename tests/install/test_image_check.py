"""The rules of `make image-check` (scripts/image_check.py) that need no container engine: the podman flags it
derives from the hooks Deployment, the version comparison against constraints.txt, and what counts as a
write outside /tmp. The builds and runs themselves are `make image-check`, part of `make test`."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
image_check = load_script("image_check")

DEPLOYMENT = yamlio.load((ROOT / "metacontroller" / "hooks" / "deployment.yaml").read_text())


def flags(deployment: dict) -> list[str]:
    return image_check.run_args(deployment, volumes={"tmp": Path("/scratch/tmp")}, port=18080)


def pairs(args: list[str]) -> set[tuple[str, str]]:
    return {(a, b) for a, b in itertools.pairwise(args) if a.startswith("--")}


def test_the_container_runs_with_every_security_setting_of_the_deployment():
    args = flags(DEPLOYMENT)
    assert {("--user", "10001:10001"), ("--cap-drop", "ALL"), ("--security-opt", "no-new-privileges"),
            ("--memory", str(2**30)), ("--cpus", "1"), ("--env", "PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus"),
            ("--volume", "/scratch/tmp:/tmp:rw"), ("--publish", "127.0.0.1:18080:8080"),
            ("--stop-timeout", "40")} <= pairs(args)
    assert "--read-only" in args and "--read-only-tmpfs=false" in args


@pytest.mark.parametrize(("change", "gone"), [
    pytest.param(lambda c: c["securityContext"].pop("readOnlyRootFilesystem"), "--read-only", id="writable-root"),
    pytest.param(lambda c: c["securityContext"].pop("capabilities"), "--cap-drop", id="capabilities-kept"),
    pytest.param(lambda c: c["resources"].pop("limits"), "--memory", id="no-limits"),
])
def test_a_weaker_deployment_gives_a_weaker_container(change, gone):
    weaker = copy.deepcopy(DEPLOYMENT)
    change(weaker["spec"]["template"]["spec"]["containers"][0])
    assert gone not in flags(weaker)


def test_what_cannot_be_reproduced_is_refused_not_dropped():
    other = copy.deepcopy(DEPLOYMENT)
    other["spec"]["template"]["spec"]["volumes"] = [{"name": "tmp", "hostPath": {"path": "/x"}}]
    with pytest.raises(image_check.CheckFailed, match="only emptyDir"):
        flags(other)
    other = copy.deepcopy(DEPLOYMENT)
    other["spec"]["template"]["spec"]["containers"][0]["env"].append({"name": "X", "valueFrom": {}})
    with pytest.raises(image_check.CheckFailed, match="env X"):
        flags(other)


@pytest.mark.parametrize(("quantity", "expected"), [("1Gi", 2**30), ("64Mi", 64 * 2**20), ("500M", 5 * 10**8), ("7", 7)])
def test_memory_quantities(quantity, expected):
    assert image_check.quantity_bytes(quantity) == expected


def test_cpu_quantities():
    assert image_check.cpu_cores("500m") == "0.5"
    assert image_check.cpu_cores("1") == "1"


def test_the_tmp_volume_size_limit_is_read():
    assert image_check.empty_dir_limits(DEPLOYMENT) == {"tmp": 64 * 2**20}


def test_versions_must_equal_the_constraints():
    constraints = image_check.read_pins("Flask==3.1.3\nWerkzeug==3.1.9  # why\nprometheus_client==0.23.1\n")
    requirements = image_check.read_pins("# runtime\nflask==3.1.3\nprometheus-client==0.23.1\n")
    same = {"flask": "3.1.3", "werkzeug": "3.1.9", "prometheus-client": "0.23.1", "pip": "23.0.1"}
    assert image_check.version_drift(same, constraints, requirements) == []
    floated = {**same, "werkzeug": "3.2.0"}
    assert image_check.version_drift(floated, constraints, requirements) == [
        "werkzeug 3.2.0 is installed, constraints.txt pins 3.1.9"]
    unpinned = {**same, "blinker": "1.9.0"}
    assert image_check.version_drift(unpinned, constraints, requirements) == [
        "blinker 1.9.0 is installed but not pinned in constraints.txt"]
    missing = {k: v for k, v in same.items() if k != "flask"}
    assert image_check.version_drift(missing, constraints, requirements) == ["flask (required, pinned 3.1.3) is not installed"]


def test_every_runtime_requirement_is_pinned_in_constraints():
    constraints = image_check.read_pins((ROOT / "constraints.txt").read_text())
    for requirements in ("requirements.txt", "requirements-mxnet.txt"):
        for name, version in image_check.read_pins((ROOT / requirements).read_text()).items():
            assert constraints.get(name) == version, (requirements, name)


def test_only_podmans_own_mount_points_and_tmp_may_change():
    diff = ["C /etc", "A /etc/hosts", "C /tmp", "A /tmp/prometheus/counter_6.db", ""]
    assert image_check.unexpected_writes(diff) == []
    assert image_check.unexpected_writes([*diff, "A /app/hooks/x.pyc", "A /var/lib/prometheus"]) == [
        "/app/hooks/x.pyc", "/var/lib/prometheus"]
    assert image_check.unexpected_writes(["A /tmpfile"]) == ["/tmpfile"]


def test_every_route_of_every_kind_answers_in_process_and_is_counted():
    # What check_running_hooks sends the image and reads back from /metrics, against the
    # repository's own app: one sync per route of each kind, all counted as "ok".
    from hooks.kinds import KINDS
    from hooks.server.app import create_app

    client = create_app().test_client()
    bodies, sent = image_check.sync_bodies(), 0
    for kind in KINDS:
        for route in kind.routes:
            assert image_check.in_process_answer(route, bodies[kind.name])["children"]
            assert client.post(route, json=bodies[kind.name]).status_code == 200
            sent += 1
    assert sent == 3
    assert image_check.ok_syncs(client.get("/metrics").get_data()) == sent


def test_ok_syncs_is_none_without_the_series():
    assert image_check.ok_syncs(b"# HELP other\nother_total 1.0\n") is None


@pytest.mark.parametrize(("passwd", "user", "problem"), [
    pytest.param("root:x:0:0:root:/root:/bin/bash\ndigits:x:10001:10001::/nonexistent:/usr/sbin/nologin\n",
                 "10001:10001", None, id="entry"),
    pytest.param("root:x:0:0:root:/root:/bin/bash\n", "10001", "uid 10001 has no /etc/passwd entry", id="missing"),
    pytest.param("app:x:100010:1::/:/bin/sh\n", "10001", "uid 10001 has no /etc/passwd entry", id="prefix-only"),
    pytest.param("digits:x:10001:10001::/:/bin/sh\n", "digits", "is not numeric", id="named-user"),
])
def test_an_images_user_needs_a_passwd_entry(passwd, user, problem):
    found = image_check.passwd_problem(passwd, user)
    assert (found is None) if problem is None else (problem in found)


@pytest.mark.parametrize(("driver", "free_gib", "fails"), [
    ("overlay", 2, True), ("overlay", 4, False), ("vfs", 4, True), ("vfs", 9, False),
], ids=["overlay-short", "overlay-enough", "vfs-short", "vfs-enough"])
def test_the_check_stops_before_building_when_the_disk_is_short(monkeypatch, tmp_path, driver, free_gib, fails):
    usage = type("Usage", (), {"free": free_gib * 1024**3})
    monkeypatch.setattr(image_check.shutil, "disk_usage", lambda path: usage)
    if fails:
        with pytest.raises(image_check.CheckFailed, match=f"with {driver} storage.*IMAGE_CHECK=skip"):
            image_check.check_free_disk(driver)
    else:
        image_check.check_free_disk(driver)
