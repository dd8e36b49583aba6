"""The progress helper for training code (reporter/mxjob_progress.py): harmless outside the operator,
rate-limited, never raising; and its write, and the documented curl, accepted by a real API server with
the job's own ServiceAccount token, then read by the hook into status.progress."""
from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
from helpers.apiserver import create, dynamic, install
from helpers.mcsim import T0, mxjob
from helpers.metacontroller_writes import METACONTROLLER
from helpers.requests import mxjob_sync_request

from hooks.mxjob.sync import sync_mxjob
from hooks.shared.progress import ACCESS_KEYS
from localcluster.controlplane.processes import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
HELPER = ROOT / "reporter" / "mxjob_progress.py"


def load() -> ModuleType:
    """A fresh copy of the helper module (its default reporter is per module)."""
    spec = importlib.util.spec_from_file_location("mxjob_progress_under_test", HELPER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ENV = {"MXJOB_PROGRESS_CONFIGMAP": "mx-progress", "MXJOB_PROGRESS_NAMESPACE": "ns",
       "MXJOB_PROGRESS_REPORTER": "worker-0", "KUBERNETES_SERVICE_HOST": "10.0.0.1",
       "KUBERNETES_SERVICE_PORT": "443", "MXJOB_ATTEMPT": "2"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reporter(tmp_path: Path, env: dict | None = None, **kwargs):
    token = tmp_path / "token"
    token.write_text("tok\n")
    sent: list[tuple[str, dict, dict]] = []
    module = load()
    clock = Clock()
    made = module.Reporter({**ENV, "MXJOB_PROGRESS_TOKEN_FILE": str(token), **(env or {})}, clock=clock,
                           wall=lambda: 1795000000.0,
                           send=kwargs.get("send") or (lambda url, body, headers: sent.append((url, json.loads(body), headers))))
    return made, sent, clock


def test_it_is_python_38_code_with_only_the_standard_library():
    tree = ast.parse(HELPER.read_text(), feature_version=(3, 8))
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_outside_the_operator_every_call_does_nothing(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    module = load()
    assert module.report(1, 10, loss=0.5) is False
    callback = module.batch_end_callback(total=10)
    callback(SimpleNamespace(epoch=0, nbatch=1, eval_metric=None))
    assert module.flush() is False and module._reporter().writes == 0


def test_a_pod_without_a_reporter_name_does_not_report(tmp_path):
    made, sent, _ = reporter(tmp_path, {"MXJOB_PROGRESS_REPORTER": ""})
    assert made.report(1) is False and sent == []


def test_a_report_is_one_merge_patch_of_this_reporters_entry(tmp_path):
    made, sent, _ = reporter(tmp_path)
    assert made.report(5, 100, loss=0.25, acc=1, name="x", bad=float("nan"), flag=True) is True
    [(url, body, headers)] = sent
    assert url == "https://10.0.0.1:443/api/v1/namespaces/ns/configmaps/mx-progress"
    assert headers == {"Authorization": "Bearer tok", "Content-Type": "application/merge-patch+json"}
    assert list(body) == ["data"] and list(body["data"]) == ["worker-0"]
    assert json.loads(body["data"]["worker-0"]) == {
        "attempt": 2, "step": 5, "total": 100, "metrics": {"loss": 0.25, "acc": 1, "name": "x", "flag": 1.0},
        "time": "2026-11-18T11:06:40Z"}


def test_one_write_per_interval_keeping_the_newest_and_the_final_step_at_once(tmp_path):
    made, sent, clock = reporter(tmp_path, {"MXJOB_PROGRESS_INTERVAL": "30"})
    assert made.report(1, 10)
    clock.now += 10
    assert not made.report(2, 10) and not made.report(3, 10)
    clock.now += 20
    assert made.report(4, 10)
    clock.now += 1
    assert not made.report(5, 10)
    assert made.flush() and not made.flush()
    assert made.report(10, 10), "the last step is written at once"
    assert [json.loads(b["data"]["worker-0"])["step"] for _, b, _ in sent] == [1, 4, 5, 10]


def test_failures_never_reach_the_training_loop_and_are_said_once(tmp_path, capsys):
    def broken(url, body, headers):
        raise OSError("connection refused")

    made, _, clock = reporter(tmp_path, send=broken)
    assert made.report(1) is False
    clock.now += 60
    assert made.report(2) is False
    assert capsys.readouterr().err.count("mxjob_progress: a progress report") == 1
    made.token_file = str(tmp_path / "missing")
    clock.now += 60
    assert made.report(3) is False


def test_the_batch_end_callback_counts_batches_and_sends_the_eval_metric(tmp_path):
    made, sent, _ = reporter(tmp_path, {"MXJOB_PROGRESS_INTERVAL": "0"})
    metric = SimpleNamespace(get_name_value=lambda: [("accuracy", 0.5), ("cross-entropy", 1.25)])
    callback = load().batch_end_callback(total=4, reporter=made)
    for nbatch in range(3):
        callback(SimpleNamespace(epoch=1, nbatch=nbatch, eval_metric=metric))
    entries = [json.loads(b["data"]["worker-0"]) for _, b, _ in sent]
    assert [e["step"] for e in entries] == [1, 2, 3]
    assert entries[-1]["metrics"] == {"accuracy": 0.5, "cross-entropy": 1.25, "epoch": 1}
    callback(None)  # whatever MXNet hands it, it never raises


MPI_ENV = {"MXJOB_PROGRESS_REPORTER": "", "MXJOB_ATTEMPT": "0"}


@pytest.mark.parametrize("ranks,rank_env,name", [
    ("0", {"OMPI_COMM_WORLD_RANK": "0"}, "rank-0"),
    ("0", {"OMPI_COMM_WORLD_RANK": "2"}, None),
    ("all", {"OMPI_COMM_WORLD_RANK": "2"}, "rank-2"),
    ("all", {"PMIX_RANK": "3"}, "rank-3"),
    ("all", {"PMI_RANK": "4"}, "rank-4"),
    ("0", {}, "rank-0"),
    ("all", {"OMPI_COMM_WORLD_RANK": "x"}, None),
    ("", {"OMPI_COMM_WORLD_RANK": "0"}, None),
], ids=["rank-0-of-first", "rank-2-of-first", "rank-2-of-all", "pmix", "pmi", "no-mpiexec-is-rank-0",
        "unreadable-rank", "no-ranks-asked"])
def test_a_chainerjob_rank_reports_by_its_mpi_rank_when_listed(tmp_path, ranks, rank_env, name):
    made, sent, _ = reporter(tmp_path, {**MPI_ENV, "MXJOB_PROGRESS_MPI_RANKS": ranks, **rank_env})
    assert made.report(1) is (name is not None)
    assert [list(body["data"]) for _, body, _ in sent] == ([[name]] if name else [])


def test_the_chainer_extension_sends_the_iteration_and_the_observation(tmp_path):
    made, sent, _ = reporter(tmp_path, {"MXJOB_PROGRESS_INTERVAL": "0"})
    extension = load().chainer_extension(reporter=made)
    assert extension.trigger == (1, "iteration")
    trainer = SimpleNamespace(updater=SimpleNamespace(iteration=7, epoch=1),
                              observation={"main/loss": SimpleNamespace(array=0.5), "main/accuracy": 0.75,
                                           "text": "not a number"},
                              stop_trigger=SimpleNamespace(period=100, unit="iteration"))
    extension(trainer)
    [(_, body, _)] = sent
    entry = json.loads(body["data"]["worker-0"])
    assert (entry["step"], entry["total"]) == (7, 100)
    assert entry["metrics"] == {"main/loss": 0.5, "main/accuracy": 0.75, "epoch": 1}
    extension(None)  # whatever it is handed, it never raises


def test_the_chainer_extension_runs_in_a_real_chainer_trainer(tmp_path):
    chainer = pytest.importorskip("chainer")
    import numpy as np

    made, sent, _ = reporter(tmp_path, {"MXJOB_PROGRESS_INTERVAL": "0"})
    data = chainer.datasets.TupleDataset(np.zeros((8, 2), np.float32), np.zeros(8, np.int32))
    model = chainer.links.Classifier(chainer.links.Linear(2, 2))
    optimizer = chainer.optimizers.SGD()
    optimizer.setup(model)
    updater = chainer.training.StandardUpdater(chainer.iterators.SerialIterator(data, 4), optimizer)
    trainer = chainer.training.Trainer(updater, (3, "iteration"), out=str(tmp_path / "out"))
    trainer.extend(load().chainer_extension(reporter=made))
    trainer.run()
    entries = [json.loads(b["data"]["worker-0"]) for _, b, _ in sent]
    assert [(e["step"], e["total"]) for e in entries] == [(1, 3), (2, 3), (3, 3)]
    assert {"main/loss", "main/accuracy", "epoch"} <= set(entries[-1]["metrics"])


# --- on a real API server ------------------------------------------------------------------------

@pytest.fixture
def job_account(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> dict[str, str]:
    """A job's reporting children made as Metacontroller makes them, and the env its pods get, with a
    token the API server issued for the job's ServiceAccount (TokenRequest, as the kubelet asks)."""
    install(control_plane)
    parent = mxjob(replicas={"Worker": 1}, runPolicy={"progress": {}})
    parent["metadata"]["namespace"] = namespace
    request = mxjob_sync_request(parent)
    request["children"].update({key: {} for key in ACCESS_KEYS})
    for child in sync_mxjob(request, now=T0)["children"]:
        assert create(control_plane, child, namespace, user=METACONTROLLER).accepted
    token = tmp_path / "token"
    token.write_text(control_plane.kubectl("create", "token", "mx-progress", "-n", namespace).stdout.strip())
    host, port = re.match(r"https://([^:/]+):(\d+)", control_plane.server).groups()  # type: ignore[union-attr]
    return {**ENV, "MXJOB_PROGRESS_NAMESPACE": namespace, "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port, "MXJOB_PROGRESS_TOKEN_FILE": str(token),
            "MXJOB_PROGRESS_CA_FILE": str(control_plane.ca_file), "MXJOB_ATTEMPT": "0"}


def progress_of(control_plane: ControlPlane, namespace: str) -> dict:
    """status.progress as the hook reads the ConfigMap the server now holds."""
    cm = dynamic(control_plane).resources.get(api_version="v1", kind="ConfigMap").get(
        name="mx-progress", namespace=namespace).to_dict()
    parent = mxjob(replicas={"Worker": 1}, runPolicy={"progress": {}})
    parent["metadata"]["namespace"] = namespace
    request = mxjob_sync_request(parent)
    request["children"].update({key: {} for key in ACCESS_KEYS})
    request["children"]["ConfigMap.v1"]["mx-progress"] = cm
    return sync_mxjob(request, now=T0)["status"]["progress"]


@pytest.mark.apiserver
def test_the_helper_writes_with_the_jobs_token_and_the_hook_reads_it(control_plane, namespace, job_account):
    module = load()
    made = module.Reporter(job_account)
    assert made.report(30, 120, loss=0.25) is True, "see the stderr line for why"
    progress = progress_of(control_plane, namespace)
    assert (progress["reporter"], progress["step"], progress["progressPercentage"]) == ("worker-0", 30, 25)
    assert progress["metrics"] == [{"name": "loss", "value": "0.25"}]


@pytest.mark.apiserver
def test_the_documented_curl_is_the_same_write(control_plane, namespace, job_account):
    """docs/progress.md's curl, run as written there, with the env a pod has."""
    command = re.search(r"```sh\n(curl .*?)\n```", (ROOT / "docs" / "progress.md").read_text(), re.S)
    assert command is not None, "docs/progress.md shows the curl call"
    env = {**job_account, "PATH": "/usr/bin:/bin"}
    script = command.group(1).replace("/var/run/secrets/kubernetes.io/serviceaccount/token", env["MXJOB_PROGRESS_TOKEN_FILE"])
    script = script.replace("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt", env["MXJOB_PROGRESS_CA_FILE"])
    done = subprocess.run(["sh", "-c", script], env={**env, "STEP": "60", "TOTAL": "120"},
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    progress = progress_of(control_plane, namespace)
    assert (progress["reporter"], progress["step"], progress["progressPercentage"]) == ("worker-0", 60, 50)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", progress["lastUpdatedTime"])


@pytest.mark.apiserver
@pytest.mark.mxnet
def test_the_digits_example_reports_from_a_real_mxnet_process(control_plane, namespace, job_account):
    """examples/digits/train.py, run as a worker process with the env a reporting pod gets: its
    reports reach the API server with the job's token, the last one at step == total."""
    pytest.importorskip("mxnet")
    env = {**job_account, "MXJOB_PROGRESS_INTERVAL": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    done = subprocess.run([sys.executable, "-u", str(ROOT / "examples" / "digits" / "train.py"), "--kv-store", "local",
                           "--epochs", "2", "--min-accuracy", "0"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "mxjob_progress:" not in done.stderr, done.stderr
    progress = progress_of(control_plane, namespace)
    assert progress["reporter"] == "worker-0" and progress["step"] == progress["total"] > 0
    assert progress["progressPercentage"] == 100
    assert {m["name"] for m in progress["metrics"]} == {"epoch", "validation_accuracy"}
