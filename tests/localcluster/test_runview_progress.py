"""`localcluster run`'s view of a job that reports its progress (status.progress, docs/progress.md):
the job's step and percentage, and each running reporter's step beside its last line of output."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from localcluster.cli import runview

PROGRESS = {"reporter": "worker-1", "attempt": 0, "step": 40, "total": 100, "progressPercentage": 40,
            "lastUpdatedTime": "2026-11-21T10:00:00Z", "reporters": [
                {"name": "worker-0", "attempt": 0, "step": 55, "total": 100, "progressPercentage": 55},
                {"name": "worker-1", "attempt": 0, "step": 40, "total": 100, "progressPercentage": 40}]}


class Cluster:
    """What render() reads of a LocalCluster: one job, its pods, their logs."""

    def __init__(self, root: Path, status: dict[str, Any]):
        self.root, self.status = root, status

    def get_job(self, name: str, namespace: str) -> dict[str, Any]:
        return {"kind": "MXJob", "metadata": {"name": name, "uid": "u"}, "status": self.status}

    def pods(self, name: str, namespace: str) -> list[dict[str, Any]]:
        return [{"metadata": {"name": f"{name}-{rest}"}, "status": {"phase": "Running"}}
                for rest in ("scheduler-0", "worker-0", "worker-1")]

    def job_dir(self, name: str, namespace: str) -> Path:
        return self.root

    def controller_for(self, job: Any) -> None:
        return None


def test_a_reporting_job_shows_its_progress_and_each_reporters_step(tmp_path: Path):
    for pod in ("scheduler-0", "worker-0", "worker-1"):
        (tmp_path / f"j-{pod}.log").write_text(f"{pod} says hi\n")
    lines = runview.render(Cluster(tmp_path, {"progress": PROGRESS}), "j")  # type: ignore[arg-type]
    assert lines[1] == "  progress: step 40/100 40% (reporter worker-1, attempt 0, reported 2026-11-21T10:00:00Z)"
    rows = [line for line in lines if line.startswith("    > ")]
    assert rows == ["    > scheduler-0 says hi", "    > [step 55/100 55%] worker-0 says hi",
                    "    > [step 40/100 40%] worker-1 says hi"]


def test_one_reporter_is_the_top_level_and_a_job_that_does_not_report_shows_no_progress(tmp_path: Path):
    single = {key: value for key, value in PROGRESS.items() if key != "reporters"}
    assert runview.reports_by_reporter(single) == {"worker-1": single}
    assert runview.step_text({"step": 7}) == "step 7"
    lines = runview.render(Cluster(tmp_path, {}), "j")  # type: ignore[arg-type]
    assert not any("progress" in line or "[step" in line for line in lines)
    assert lines.count("    > (no output yet)") == 3
