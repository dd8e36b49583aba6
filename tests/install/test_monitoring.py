"""Per-job metrics and alerts (monitoring/): the kube-state-metrics configuration and the PrometheusRule.

1. The configuration covers both kinds in the version Metacontroller watches, and every path in it names a field
   the CRD declares (a misspelt path would give no series, silently).
2. The metrics of real objects: every status the hooks write (each golden answer's) is written onto a job on the
   real API server through the status subresource, as Metacontroller writes it; the stored jobs, listed as
   kube-state-metrics lists them, give the series this test expects from the status alone (state, conditions,
   attempt, restarts, start and completion times, replica counts). The series are rendered by helpers/ksm.py
   (kube-state-metrics' custom-resource-state semantics, from its source); where a kube-state-metrics binary is
   built (make monitoring-tools), it is run against the same server and must serve the same series.
3. The PrometheusRule: every series an alert reads is one the configuration produces, with the labels it
   matches on; the real API server admits it under the Prometheus Operator's own CRD, with the rest of monitoring/.
"""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from helpers import yamlio
from helpers.apiserver import dynamic, install, refresh
from helpers.golden import golden_statuses
from helpers.ksm import Sample, parse_exposition, render
from helpers.manifests import prometheusrule_crd, the
from helpers.manifests import render as kustomize

from hooks.chainerjob.vocabulary import STALLED as CHAINER_STALLED
from hooks.chainerjob.vocabulary import ConditionType as ChainerCondition
from hooks.mxjob.vocabulary import STALLED as MX_STALLED
from hooks.mxjob.vocabulary import ConditionType as MXCondition
from localcluster.controlplane.processes import ControlPlane
from localcluster.node.dns import free_port

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "monitoring"
CONFIG = yamlio.load((MONITORING / "custom-resource-state.yaml").read_text())
RULE = yamlio.load((MONITORING / "prometheusrule.yaml").read_text())
CRDS = {crd["spec"]["names"]["kind"]: crd
        for crd in (yamlio.load(p.read_text()) for p in sorted((ROOT / "crd").glob("*-crd.yaml")))}
CONDITION_TYPES = {"MXJob": MXCondition.__args__, "ChainerJob": ChainerCondition.__args__}  # type: ignore[attr-defined]
PARENT = {"MXJob": "examples/dist-cpu-train.yaml", "ChainerJob": "examples/chainerjob/chainerjob-mn.yaml"}
PREFIX = {"MXJob": "kube_mxjob_", "ChainerJob": "kube_chainerjob_"}
# Where make monitoring-tools (scripts/build-monitoring-tools.sh) puts the binary (KUBE_STATE_METRICS names another).
KSM_BINARY = Path(os.environ.get("KUBE_STATE_METRICS", ROOT / ".tools" / "bin" / "kube-state-metrics"))


def resource_config(kind: str) -> dict:
    [found] = [r for r in CONFIG["spec"]["resources"] if r["groupVersionKind"]["kind"] == kind]
    return dict(found)


def storage_version(kind: str) -> str:
    return next(v["name"] for v in CRDS[kind]["spec"]["versions"] if v["storage"])


# ---------------------------------------------------------------------------------------------
# 1. The configuration


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_the_configuration_reads_each_kind_in_the_version_metacontroller_watches(kind):
    gvk = resource_config(kind)["groupVersionKind"]
    assert (gvk["group"], gvk["version"]) == (CRDS[kind]["spec"]["group"], storage_version(kind))
    controller = next(c for c in kustomize(ROOT / "metacontroller") if c["kind"] == "CompositeController"
                      and c["spec"]["parentResource"]["resource"] == CRDS[kind]["spec"]["names"]["plural"])
    assert controller["spec"]["parentResource"]["apiVersion"] == f"{gvk['group']}/{gvk['version']}"


def schema_at(schema: dict, path: list[str]) -> dict | None:
    """The CRD schema node a configuration path leads to (list indexes and lookups step into items), or None."""
    for part in path:
        if schema.get("type") == "array" and (re.fullmatch(r"-?\d+", part) or part.startswith("[")):
            schema = schema["items"]
        elif part in schema.get("properties", {}):
            schema = schema["properties"][part]
        else:
            return None
    return schema


def configured_paths(kind: str) -> Iterator[tuple[str, list[str]]]:
    """(what, full path from the object's root) for every path in the kind's configuration."""
    resource = resource_config(kind)
    for label, path in resource["labelsFromPath"].items():
        yield f"label {label}", path
    for metric in resource["metrics"]:
        each = metric["each"].get("gauge") or metric["each"].get("stateSet")
        base = each["path"]
        items = base + ["*"] if each.get("labelFromKey") else base + ["0"] if base[-1] == "conditions" else base
        if each.get("valueFrom"):
            yield metric["name"], items + each["valueFrom"]
        else:
            yield metric["name"], base
        for label, path in each.get("labelsFromPath", {}).items():
            yield f"{metric['name']} label {label}", items + path


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_configured_path_is_a_field_the_crd_declares(kind):
    root = next(v for v in CRDS[kind]["spec"]["versions"] if v["storage"])["schema"]["openAPIV3Schema"]
    root = copy.deepcopy(root)
    root["properties"]["metadata"] = {"type": "object", "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}}}
    missing = []
    for what, path in configured_paths(kind):
        node = root
        for i, part in enumerate(path):
            if part == "*":  # a map's values
                node = node.get("additionalProperties") or {}
                continue
            found = schema_at(node, [part])
            if found is None:
                missing.append(f"{what}: {path[:i + 1]}")
                break
            node = found
    assert missing == []


# The status fields no metric reads, each with why; every other field of the status is read by one, so a field
# added to a CRD's status is a decision here (a metric, or a reason), not a gap found later.
LEFT_OUT = {
    "status.observedGeneration": "Metacontroller's bookkeeping, not the job's",
    "status.specError": "text, for kubectl describe (a refused edit leaves the job running as it was)",
    "status.statusWarnings": "text, for kubectl describe",
    "status.progress.reporter": "which reporter the progress series are of; as a label, each change of the least advanced "
                                "reporter would end a series and start another",
    "status.progress.attempt": "status.attempt",
    "status.progress.total": "progressPercentage says how far of it",
    "status.progress.metrics": "the training code's own values, as text: serve them from the training code",
    "status.progress.reporters": "per reporter: the job's series are of the least advanced one",
}
LEFT_OUT_OF = {
    "MXJob": {
        **LEFT_OUT,
        "status.waiting": "text for the Waiting column (who holds a pod back, and why); a job that waits is Created, not Running",
        "status.cleanedUpTime": "after the job finished: its completionTime is the metric",
        "status.replicaStatuses.*.completedIndexes": "text: the indexes that succeeded, counted in succeeded",
        "status.mxReplicaStatuses": "older operators' name for replicaStatuses, never written",
        "status.restartHistory": "the hook's bookkeeping per pod, summed in restartCount",
    },
    "ChainerJob": LEFT_OUT,
}


def status_fields(schema: dict, path: tuple[str, ...] = ("status",)) -> Iterator[tuple[str, ...]]:
    """The path of every field of a status schema that holds a value (a map's values are `*`; a list is one field)."""
    if schema.get("type") == "object":
        for name, field in schema.get("properties", {}).items():
            yield from status_fields(field, (*path, name))
        if isinstance(schema.get("additionalProperties"), dict):
            yield from status_fields(schema["additionalProperties"], (*path, "*"))
    else:
        yield path


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_every_status_field_is_read_by_a_metric_or_left_out_for_a_reason(kind):
    root = next(v for v in CRDS[kind]["spec"]["versions"] if v["storage"])["schema"]["openAPIV3Schema"]
    read = [tuple(path) for _, path in configured_paths(kind)]
    left_out = {tuple(field.split(".")) for field in LEFT_OUT_OF[kind]}
    unread = [".".join(field) for field in status_fields(root["properties"]["status"])
              if not any(path[:len(field)] == field for path in read)
              and not any(field[:len(out)] == out for out in left_out)]
    assert unread == []
    # And nothing is left out that a metric reads, or that the status does not have.
    fields = list(status_fields(root["properties"]["status"]))
    assert [".".join(out) for out in left_out if not any(f[:len(out)] == out for f in fields)] == []
    assert [".".join(out) for out in left_out if any(path[:len(out)] == out for path in read)] == []


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_the_state_lists_every_condition_type_the_hooks_write(kind):
    [state] = [m for m in resource_config(kind)["metrics"] if m["each"]["type"] == "StateSet"]
    assert sorted(state["each"]["stateSet"]["list"]) == sorted(CONDITION_TYPES[kind])


# ---------------------------------------------------------------------------------------------
# 2. The metrics of real objects


STATUS_CASES = golden_statuses()


def test_the_cases_cover_restarts_failures_and_both_kinds():
    statuses = list(STATUS_CASES.values())
    assert {kind for kind, _ in statuses} == {"MXJob", "ChainerJob"}
    assert any(s.get("attempt", 0) > 0 for k, s in statuses if k == "MXJob")
    assert any(s.get("restartCount", 0) > 0 for k, s in statuses if k == "MXJob")
    assert any(s.get("failed", 0) > 0 for k, s in statuses if k == "ChainerJob")
    assert any(s.get("attempt", 0) > 0 for k, s in statuses if k == "ChainerJob")
    for kind in ("MXJob", "ChainerJob"):
        assert {s["conditions"][-1]["type"] for k, s in statuses if k == kind} >= {"Failed", "Running"}
        assert any("completionTime" in s for k, s in statuses if k == kind)
        assert any({"step", "progressPercentage", "lastUpdatedTime"} <= set(s.get("progress", {})) for k, s in statuses if k == kind)


def epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def expected_samples(job: dict) -> list[Sample]:
    """What the metrics should say about a job, read from its status alone."""
    kind, status = job["kind"], job.get("status", {})
    group, version = job["apiVersion"].split("/")
    base = {"customresource_group": group, "customresource_version": version, "customresource_kind": kind,
            "namespace": job["metadata"]["namespace"], "name": job["metadata"]["name"]}
    prefix = PREFIX[kind]
    found: list[tuple[str, dict[str, str], float]] = []
    conditions = status.get("conditions", [])
    for c in conditions:
        labels = {"condition": c["type"], **({"reason": c["reason"]} if "reason" in c else {})}
        found.append(("status_condition", labels, 1.0 if c["status"] == "True" else 0.0))
    if conditions:
        found += [("status_state", {"state": s}, float(s == conditions[-1]["type"])) for s in CONDITION_TYPES[kind]]
    for field in ("startTime", "completionTime"):
        if field in status:
            found.append(("status_start_time" if field == "startTime" else "status_completion_time", {}, epoch(status[field])))
    progress = status.get("progress", {})
    found += [(f"status_progress_{name}", {}, float(progress[field]))
              for field, name in (("step", "step"), ("progressPercentage", "percentage")) if field in progress]
    if "lastUpdatedTime" in progress:
        found.append(("status_progress_last_updated_time", {}, epoch(progress["lastUpdatedTime"])))
    if kind == "MXJob":
        found += [("status_attempt", {}, float(status.get("attempt", 0))),
                  ("status_restart_count", {}, float(status.get("restartCount", 0)))]
        for rtype, counts in status.get("replicaStatuses", {}).items():
            found += [(f"status_replicas_{what}", {"replica_type": rtype}, float(counts.get(what, 0)))
                      for what in ("active", "succeeded", "failed")]
    else:
        found += [(f"status_{what}", {}, float(status.get(what, 0))) for what in ("active", "succeeded", "failed", "attempt")]
        for name, counts in status.get("workerSets", {}).items():
            found += [("status_worker_replicas", {"worker_set": name}, float(counts.get("replicas", 0))),
                      ("status_worker_ready_replicas", {"worker_set": name}, float(counts.get("readyReplicas", 0)))]
    return sorted(((prefix + name, frozenset({**base, **labels}.items()), value) for name, labels, value in found),
                  key=lambda s: (s[0], sorted(s[1])))


@pytest.mark.parametrize("case", sorted(STATUS_CASES))
def test_each_status_the_hooks_write_gives_the_series_it_should(case):
    kind, status = STATUS_CASES[case]
    job = {"apiVersion": f"kubeflow.org/{storage_version(kind)}", "kind": kind,
           "metadata": {"name": case[:63], "namespace": "ns"}, "status": status}
    assert render(CONFIG, [job]) == expected_samples(job)


def test_a_job_without_a_status_gives_zero_counts_and_no_state():
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "new", "namespace": "ns"}}
    names = {name for name, _, _ in render(CONFIG, [job])}
    assert names == {"kube_mxjob_status_attempt", "kube_mxjob_status_restart_count"}
    assert {value for _, _, value in render(CONFIG, [job])} == {0.0}


@pytest.fixture(scope="module")
def stored_jobs(control_plane: ControlPlane) -> Iterator[tuple[str, list[dict]]]:
    """Every status case written onto a job of its kind on the real API server; (namespace, the stored jobs)."""
    install(control_plane)
    refresh(control_plane)
    namespace = f"metrics-{os.getpid()}"
    control_plane.kubectl("create", "namespace", namespace)
    client = dynamic(control_plane)
    try:
        for case, (kind, status) in sorted(STATUS_CASES.items()):
            [manifest] = [d for d in yamlio.load_all((ROOT / PARENT[kind]).read_text()) if d and d.get("kind") == kind]
            api_version = f"kubeflow.org/{storage_version(kind)}"
            resource = client.resources.get(api_version=api_version, kind=kind)
            body = {**manifest, "apiVersion": api_version, "metadata": {"name": case[:63], "namespace": namespace}}
            created = resource.create(body=body, namespace=namespace).to_dict()
            resource.status.replace(body={**created, "status": {**status, "observedGeneration": 1}}, namespace=namespace)
        listed = [item for plural in ("mxjobs", "chainerjobs")
                  for item in json.loads(control_plane.kubectl("get", plural, "-n", namespace, "-o", "json").stdout)["items"]]
        yield namespace, listed
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.mark.apiserver
def test_the_stored_jobs_give_the_series_their_statuses_should(stored_jobs):
    _, jobs = stored_jobs
    assert len(jobs) == len(STATUS_CASES)
    for job in jobs:
        _, status = STATUS_CASES[job["metadata"]["name"]]
        # Kept whole by the server: the series below are those of the status the hooks wrote.
        assert job["status"] == {**status, "observedGeneration": 1}
        assert render(CONFIG, [job]) == expected_samples(job), job["metadata"]["name"]


def scrape(port: int, deadline: float) -> str:
    """kube-state-metrics' /metrics once it has listed what it was asked to watch."""
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
                last = response.read().decode()
            if "kube_mxjob_status_attempt" in last and "kube_chainerjob_status_active" in last:
                return last
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"kube-state-metrics served no job metrics in time; last /metrics: {last[-2000:]!r}")


@pytest.mark.apiserver
def test_kube_state_metrics_serves_the_same_series(control_plane, stored_jobs, tmp_path):
    if not KSM_BINARY.exists():
        pytest.skip(f"NOT CHECKED against a real kube-state-metrics: {KSM_BINARY} is not built "
                    "(make monitoring-tools builds it; KUBE_STATE_METRICS names another binary)")
    namespace, jobs = stored_jobs
    port, telemetry = free_port(), free_port()
    log = tmp_path / "kube-state-metrics.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(KSM_BINARY), f"--kubeconfig={control_plane.kubeconfig}", "--custom-resource-state-only",
             f"--custom-resource-state-config-file={MONITORING / 'custom-resource-state.yaml'}", f"--namespaces={namespace}",
             "--host=127.0.0.1", f"--port={port}", "--telemetry-host=127.0.0.1", f"--telemetry-port={telemetry}"],
            stdout=out, stderr=subprocess.STDOUT)
    try:
        text = scrape(port, time.monotonic() + 60)
    finally:
        process.terminate()
        process.wait(timeout=15)
    served = [s for s in parse_exposition(text) if s[0].startswith(tuple(PREFIX.values()))]
    expected = render(CONFIG, jobs)
    assert served == expected, log.read_text()[-3000:]
    # What the alerts read is among it: each series for some job, and a restart counted where a job was restarted.
    read = {name for rule in alert_rules().values() for name, _ in re.findall(SERIES_READ, rule["expr"])}
    assert read - {name for name, _, _ in served} == set()
    attempts = {dict(labels)["name"]: value for name, labels, value in served if name == "kube_chainerjob_status_attempt"}
    assert attempts["chainerjob-restarted-by-stall"] == STATUS_CASES["chainerjob-restarted-by-stall"][1]["attempt"] == 1


# ---------------------------------------------------------------------------------------------
# 3. The alerts


# A series an alert's expression reads, and its label matchers.
SERIES_READ = r"\b(kube_[a-z_]+)(?:\{([^}]*)\})?"


def alert_rules() -> dict[str, dict]:
    return {r["alert"]: r for group in RULE["spec"]["groups"] for r in group["rules"]}


def configured_series() -> dict[str, set[str]]:
    """Each metric name the configuration produces, with the label names its series carry."""
    found = {}
    for resource in CONFIG["spec"]["resources"]:
        base = {"customresource_group", "customresource_version", "customresource_kind", *resource["labelsFromPath"]}
        for metric in resource["metrics"]:
            each = metric["each"].get("gauge") or metric["each"].get("stateSet")
            labels = base | set(each.get("labelsFromPath", {})) | {each[k] for k in ("labelFromKey", "labelName") if k in each}
            found[f"{resource['metricNamePrefix']}_{metric['name']}"] = labels
    return found


def test_the_alerts_cover_failed_restarting_and_stalled_jobs_of_both_kinds():
    assert sorted(alert_rules()) == sorted(["MXJobFailed", "ChainerJobFailed", "MXJobRestartingRepeatedly",
                                            "ChainerJobRestartingRepeatedly", "MXJobStalled", "ChainerJobStalled", "MXJobRunningTooLong",
                                            "ChainerJobRunningTooLong"])


@pytest.mark.parametrize("alert", sorted(alert_rules()))
def test_every_alert_reads_series_the_configuration_produces(alert):
    rule = alert_rules()[alert]
    series = configured_series()
    used = re.findall(SERIES_READ, rule["expr"])
    assert used, rule["expr"]
    for name, matchers in used:
        assert name in series, name
        for label, value in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', matchers):
            assert label in series[name], (name, label)
            if label == "state":
                [state] = [m for r in CONFIG["spec"]["resources"] for m in r["metrics"] if f"{r['metricNamePrefix']}_{m['name']}" == name]
                assert value in state["each"]["stateSet"]["list"]
    for label in re.findall(r"on\s*\(([^)]*)\)", rule["expr"]):
        assert all(all(lbl.strip() in series[n] for n, _ in used) for lbl in label.split(",")), label
    assert set(re.findall(r"\$labels\.(\w+)", json.dumps(rule["annotations"]))) <= {"namespace", "name"}
    assert rule["labels"]["severity"] in ("info", "warning", "critical")


@pytest.mark.parametrize("kind", sorted(CRDS))
def test_the_stalled_alert_reads_the_reason_the_hook_writes(kind):
    stalled = {"MXJob": MX_STALLED, "ChainerJob": CHAINER_STALLED}[kind]
    expr = alert_rules()[f"{kind}Stalled"]["expr"]
    assert f'{{condition="Running",reason="{stalled}"}} == 1' in expr


@pytest.mark.apiserver
def test_the_api_server_admits_monitoring(control_plane):
    crd = prometheusrule_crd()
    control_plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(crd))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}")
    if control_plane.kubectl("get", "namespace", "monitoring", check=False).returncode != 0:
        control_plane.kubectl("create", "namespace", "monitoring")
    rendered = kustomize(MONITORING)
    applied = control_plane.kubectl("apply", "-k", str(MONITORING), check=False)
    assert applied.returncode == 0, applied.stderr
    assert applied.stderr == ""
    assert len(applied.stdout.splitlines()) == len(rendered)
    stored = yamlio.load(control_plane.kubectl("get", "prometheusrule", "mxjob-operator-jobs", "-n", "monitoring", "-o", "yaml").stdout)
    assert stored["spec"] == the(rendered, "PrometheusRule")["spec"]
    config = the(rendered, "ConfigMap", "mxjob-kube-state-metrics")
    assert yamlio.load(config["data"]["custom-resource-state.yaml"]) == CONFIG
    # A misspelt rule field is refused, not dropped: the admission above is a check.
    broken = copy.deepcopy(the(rendered, "PrometheusRule"))
    broken["metadata"]["name"] = "broken"
    broken["spec"]["groups"][0]["rules"][0]["exprr"] = broken["spec"]["groups"][0]["rules"][0].pop("expr")
    refused = control_plane.kubectl("apply", "-f", "-", input=json.dumps(broken), check=False)
    assert refused.returncode != 0


# ---------------------------------------------------------------------------------------------
# The alerts under promtool, where it is built (make monitoring-tools)

PROMTOOL = Path(os.environ.get("PROMTOOL", ROOT / ".tools" / "bin" / "promtool"))


def promtool() -> Path:
    if not PROMTOOL.exists():
        pytest.skip(f"NOT CHECKED by promtool: {PROMTOOL} is not built (make monitoring-tools; PROMTOOL names another binary)")
    return PROMTOOL


def rules_file(directory: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rule file (what the Prometheus Operator hands Prometheus)."""
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": RULE["spec"]["groups"]}))
    return path


def test_promtool_accepts_the_rules(tmp_path):
    checked = subprocess.run([str(promtool()), "check", "rules", str(rules_file(tmp_path))], capture_output=True, text=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout


def series_of(case: str, metric: str, **changes: str) -> dict[str, str]:
    """The labels of one series the configuration gives for a golden status (`state="Failed"`-style filters and
    label changes in `changes`: a key prefixed with `set_` changes that label)."""
    kind, status = STATUS_CASES[case]
    job = {"apiVersion": f"kubeflow.org/{storage_version(kind)}", "kind": kind,
           "metadata": {"name": case[:63], "namespace": "team-a"}, "status": status}
    wanted = {k: v for k, v in changes.items() if not k.startswith("set_")}
    [labels] = [dict(lbls) for name, lbls, _ in render(CONFIG, [job]) if name == metric and wanted.items() <= dict(lbls).items()]
    return {**labels, **{k[4:]: v for k, v in changes.items() if k.startswith("set_")}}


def selector(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def firing(alert: str, labels: dict[str, str], value: str = "") -> dict:
    """What promtool must see fire: the series' labels and the rule's, the annotations as Prometheus renders them."""
    rule = alert_rules()[alert]

    def rendered(text: str) -> str:
        return re.sub(r"\{\{ \$value \}\}", value, re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text))

    kept = {k: v for k, v in labels.items() if k != "state" or "state" in rule["expr"]}
    return {"exp_labels": {**kept, **rule["labels"]}, "exp_annotations": {k: rendered(v) for k, v in rule["annotations"].items()}}


def test_promtool_fires_each_alert_on_series_of_the_hooks_statuses(tmp_path):
    """Each alert, on series whose labels the configuration gives for real statuses (golden answers), fires when it
    should and not before; the times and values are a timeline this test sets (promtool's clock starts at 0)."""
    failed = series_of("terminal-failed-backoff-limit", "kube_mxjob_status_state", state="Failed")
    chainer_failed = series_of("chainerjob-master-failed-backoff-limit", "kube_chainerjob_status_state", state="Failed")
    restarts = series_of("restarting-whole-job-worker-lost", "kube_mxjob_status_restart_count")
    master_failures = series_of("chainerjob-master-failed-backoff-limit", "kube_chainerjob_status_failed")
    chainer_stalled = series_of("chainerjob-progress-rank-silent", "kube_chainerjob_status_condition", condition="Running")
    stalled = series_of("running-all-pods-observed", "kube_mxjob_status_condition", condition="Running", set_reason="MXJobStalled")
    running = series_of("running-all-pods-observed", "kube_mxjob_status_state", state="Running")
    started = series_of("running-all-pods-observed", "kube_mxjob_status_start_time")
    chainer_running = series_of("chainerjob-master-running", "kube_chainerjob_status_state", state="Running")
    chainer_started = series_of("chainerjob-master-running", "kube_chainerjob_status_start_time")
    series = [
        (selector("kube_mxjob_status_state", failed), "1x1600"),
        (selector("kube_chainerjob_status_state", chainer_failed), "1x1600"),
        # One restart every 10 minutes from minute 10: 3 within the hour by minute 30.
        (selector("kube_mxjob_status_restart_count", restarts), "0x9 1x9 2x9 3x1570"),
        (selector("kube_chainerjob_status_failed", master_failures), "0x9 1x9 2x9 3x1570"),
        (selector("kube_chainerjob_status_attempt", master_failures), "0x1600"),
        (selector("kube_chainerjob_status_condition", chainer_stalled), "1x1600"),
        (selector("kube_mxjob_status_condition", stalled), "1x1600"),
        # Started at promtool's time 0, running ever since.
        (selector("kube_mxjob_status_state", running), "1x1600"),
        (selector("kube_mxjob_status_start_time", started), "0x1600"),
        (selector("kube_chainerjob_status_state", chainer_running), "1x1600"),
        (selector("kube_chainerjob_status_start_time", chainer_started), "0x1600"),
    ]
    checks = [
        ("1m", "MXJobFailed", [firing("MXJobFailed", failed)]),
        ("1m", "ChainerJobFailed", [firing("ChainerJobFailed", chainer_failed)]),
        ("25m", "MXJobRestartingRepeatedly", []),
        ("35m", "MXJobRestartingRepeatedly", [firing("MXJobRestartingRepeatedly", restarts, "3")]),
        ("25m", "ChainerJobRestartingRepeatedly", []),
        ("35m", "ChainerJobRestartingRepeatedly", [firing("ChainerJobRestartingRepeatedly", master_failures, "3")]),
        ("10m", "MXJobStalled", []),
        ("20m", "MXJobStalled", [firing("MXJobStalled", stalled)]),
        ("10m", "ChainerJobStalled", []),
        ("20m", "ChainerJobStalled", [firing("ChainerJobStalled", chainer_stalled)]),
        ("23h", "MXJobRunningTooLong", []),
        ("25h", "MXJobRunningTooLong", [firing("MXJobRunningTooLong", started)]),
        ("23h", "ChainerJobRunningTooLong", []),
        ("25h", "ChainerJobRunningTooLong", [firing("ChainerJobRunningTooLong", chainer_started)]),
        # However late, MXJobFailed names the failed job alone, not the running ones.
        ("25h", "MXJobFailed", [firing("MXJobFailed", failed)]),
    ]
    ran = promtool_test(tmp_path, series, checks)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout
    # promtool does check: expecting the stalled alert before its 15 minutes fails.
    refused = promtool_test(tmp_path, series, [("10m", "MXJobStalled", [firing("MXJobStalled", stalled)])])
    assert refused.returncode != 0, refused.stdout


def promtool_test(directory: Path, series: list[tuple[str, str]],
                  checks: list[tuple[str, str, list[dict]]]) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on the alerts: input `series` (selector, values one a minute from promtool's time 0) and
    `checks` (when, which alert, what must fire then)."""
    tests = {"rule_files": [str(rules_file(directory))], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [{"eval_time": t, "alertname": a, "exp_alerts": e} for t, a, e in checks]}]}
    test_file = directory / "tests.yaml"
    test_file.write_text(yaml.safe_dump(tests))
    return subprocess.run([str(promtool()), "test", "rules", str(test_file)], capture_output=True, text=True, timeout=120)


# ChainerJobRestartingRepeatedly over timelines of one job, a minute a value from promtool's time 0: its attempt
# (status.attempt: whole-job restarts by stallPolicy RestartJob) and its master Job's failed pods (status.failed, 0
# again under each attempt's new master Job); then, at each time, how many restarts it must fire with (None: silent).
CHAINER_RESTARTS = {
    "three-stall-restarts-in-an-hour": ("0x9 1x9 2x9 3x60", "0x90", [("25m", None), ("35m", 3), ("85m", None)]),
    # Two retries of attempt 0's master, a stall restart, two retries of attempt 1's: failed never rises by 3.
    "master-failures-across-attempts": ("0x19 1x70", "0x4 1x4 2x10 0x4 1x4 2x60", [("15m", None), ("35m", 5)]),
    "one-master-failure-then-a-stall-restart": ("0x19 1x70", "0x4 1x15 0x70", [("25m", None), ("65m", None)]),
    "one-stall-restart": ("0x19 1x70", "0x90", [("25m", None), ("65m", None)]),
    "three-master-failures-in-one-attempt": ("0x90", "0x9 1x9 2x9 3x60", [("25m", None), ("35m", 3)]),
    # One rise every 40 minutes: never three within an hour.
    "three-stall-restarts-over-two-hours": ("0x9 1x39 2x39 3x40", "0x130", [("55m", None), ("95m", None), ("125m", None)]),
}


@pytest.mark.parametrize("case", sorted(CHAINER_RESTARTS))
def test_promtool_fires_the_chainerjob_restart_alert_on_restarts_of_either_kind(case, tmp_path):
    attempts, failures, checks = CHAINER_RESTARTS[case]
    labels = series_of("chainerjob-restarted-by-stall", "kube_chainerjob_status_attempt")
    series = [(selector("kube_chainerjob_status_attempt", labels), attempts),
              (selector("kube_chainerjob_status_failed", labels), failures)]
    alert = "ChainerJobRestartingRepeatedly"
    ran = promtool_test(tmp_path, series, [(at, alert, [] if value is None else [firing(alert, labels, str(value))])
                                           for at, value in checks])
    assert ran.returncode == 0, ran.stdout + ran.stderr
