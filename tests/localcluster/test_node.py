"""The process kubelet's Node: its size (this machine's, or what `up` is told) and the status its heartbeat writes."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from localcluster.cli.commands import main
from localcluster.node.registration import GPU, MAX_PODS, machine_size, node_object, node_status


def test_by_default_the_node_is_this_machines_cpus_and_memory():
    size = machine_size()
    assert size.cpu == str(len(os.sched_getaffinity(0)))
    assert size.memory == f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') // 1024}Ki"
    assert size.capacity() == {"cpu": size.cpu, "memory": size.memory, "pods": str(MAX_PODS), "ephemeral-storage": "1Ti"}


@pytest.mark.parametrize(("cpus", "memory", "gpus", "capacity"), [
    pytest.param("4", "16Gi", 0, {"cpu": "4", "memory": "16Gi"}, id="whole-cpus"),
    pytest.param("500m", "1.5Gi", 2, {"cpu": "500m", "memory": "1.5Gi", GPU: "2"}, id="millicpus-and-gpus"),
])
def test_up_can_pretend_another_size(cpus, memory, gpus, capacity):
    node = node_object(machine_size(cpus, memory, gpus), kubelet_port=10250, now="2026-12-06T00:00:00Z")
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert {k: v for k, v in node["status"]["capacity"].items() if k not in ("pods", "ephemeral-storage")} == capacity
    assert node["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}


@pytest.mark.parametrize(("args", "says"), [
    pytest.param(["--cpus", "lots"], "--cpus 'lots' is not a positive quantity", id="cpus-not-a-quantity"),
    pytest.param(["--cpus", "0"], "--cpus '0' is not a positive quantity", id="zero-cpus"),
    pytest.param(["--memory", "16GB"], "--memory '16GB' is not a positive quantity", id="memory-in-a-unit-kubernetes-lacks"),
    pytest.param(["--gpus", "-1"], "--gpus -1 is negative", id="negative-gpus"),
])
def test_up_refuses_a_size_that_is_no_quantity_naming_the_option(tmp_path: Path, capsys, args, says):
    assert main(["--state-dir", str(tmp_path), "up", *args]) == 6
    err = capsys.readouterr().err
    assert says in err and "e.g." in err


def test_the_heartbeat_moves_the_heartbeat_time_and_keeps_the_transition_time():
    size = machine_size("2", "4Gi")
    first = node_status(size, kubelet_port=1, now="2026-12-06T00:00:00Z")
    later = node_status(size, kubelet_port=1, now="2026-12-06T00:01:00Z", previous=first)
    ready = next(c for c in later["conditions"] if c["type"] == "Ready")
    assert ready == {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": ready["message"],
                     "lastHeartbeatTime": "2026-12-06T00:01:00Z", "lastTransitionTime": "2026-12-06T00:00:00Z"}
    lost = {**first, "conditions": [{**c, "status": "Unknown"} for c in first["conditions"]]}  # the node lifecycle controller's
    back = next(c for c in node_status(size, kubelet_port=1, now="2026-12-06T00:02:00Z", previous=lost)["conditions"]
                if c["type"] == "Ready")
    assert back["lastTransitionTime"] == "2026-12-06T00:02:00Z"
