"""ChainerJob under gang scheduling on the local cluster: real ChainerMN through the rsh agent.

Under a gang every pod is created at once, so the master's mpiexec may start before a worker's
container runs; the rsh agent then waits with `kubectl get pod -o jsonpath=...` until it does.
This runs the shipped ChainerMN example through the controller the Volcano
kustomization renders, with one worker pod refused at first so the gang is visibly held back.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from helpers import yamlio
from helpers.localcluster_gang import PodRefusal, gang_controller, scheduled

from localcluster.cluster import LocalCluster, finished
from localcluster.controlplane.processes import ControlPlane

pytestmark = [pytest.mark.e2e, pytest.mark.apiserver, pytest.mark.chainer]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local" / "chainer-mn-digits.yaml"
ACCURACY = re.compile(r"final test accuracy (\d\.\d+) over 3 ranks")


def test_a_chainer_gang_is_held_then_trains_through_the_waiting_rsh_agent(tmp_path, cluster_plane: ControlPlane):
    job = yamlio.load(EXAMPLE.read_text())
    job["metadata"]["name"] = "cgang"
    config = gang_controller(tmp_path, "volcano", "chainerjob-controller")
    with (LocalCluster(tmp_path / "state", control_plane=cluster_plane, configs=[config]) as cluster,
          PodRefusal(cluster, "cgang-workerset-ws0-1") as refusal):
        cluster.submit(job)

        def held() -> list[dict] | None:
            pods = cluster.pods("cgang")
            ok = len(pods) == 2 and all(scheduled(p).get("reason") == "Unschedulable" for p in pods)
            return pods if ok else None

        pods = cluster.wait_for(held, 30, what="the master and one worker held back by the gang")
        assert {p["metadata"]["name"].rsplit("-", 1)[0] for p in pods} == {"cgang-master", "cgang-workerset-ws0"}
        time.sleep(1.0)
        assert all(p["status"]["phase"] == "Pending" for p in cluster.pods("cgang"))

        refusal.lift()
        final = cluster.wait_finished("cgang", 300)
        logs = "".join(p.read_text() for p in sorted(cluster.job_dir("cgang").glob("cgang-master-?????.log")))
        group = cluster.store.get("scheduling.volcano.sh/v1beta1", "PodGroup", "default", "cgang")

    assert finished(final) == "Succeeded", (final.get("status"), logs[-2000:])
    accuracy = ACCURACY.search(logs)
    assert accuracy is not None and float(accuracy.group(1)) >= 0.9, logs[-2000:]
    assert group is None  # the finished job's PodGroup is gone
