"""Every request body that once broke the hook (tests/fuzz_repro/) gets the answer the rules say.

The files come from fuzzing the MXJob sync route from outside: the top level holds one
hand-minimised body per root cause, generated/ one body per failure signature (its .meta.json says
what the hook answered then). The rules, per class of input:
- a well-formed request for a new job with a bad spec: 200, Failed/MXJobFailedValidation, no child;
- the same for a job that has children: 200, specError, every child kept as last applied;
- a malformed request (parent identity or an observed child of the wrong shape): 400 with a JSON
  message naming the field;
- anything else: 200 with children the real API server admits (not checked under CONTROLPLANE=skip); a status field not in the shape the
  hook writes is ignored and named in statusWarnings.
Every 200 is deterministic and its status a fixed point. Never a 500.
"""
from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers.fuzz_repro import GENERATED_CHUNKED, GENERATED_MALFORMED

from hooks.mxjob.sync import sync_mxjob
from hooks.server.app import create_app

T0 = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)

HERE = Path(__file__).resolve().parents[1] / "fuzz_repro"
VALID, FAILED_VALIDATION, SPEC_ERROR, BAD_REQUEST = "valid", "failed-validation", "spec-error", "400"

EXPECTED = {
    "01-huge-replicas": FAILED_VALIDATION,
    "02-deadline-int64-max": FAILED_VALIDATION,
    # A live Service outside the layout: the job was started with another one (issue 29), so the
    # edit is refused and every child kept, as for a pod outside the layout.
    "03-finished-job-stray-service": SPEC_ERROR,
    "04-service-duplicate-port": VALID,
    # One number on two protocols: Metacontroller merges a Service's ports by number alone, so the
    # Service could never be updated; refused since turn 3 (hooks.shared.merge).
    "04b-service-duplicate-port-name": FAILED_VALIDATION,
    "05-template-env-not-a-list": FAILED_VALIDATION,
    "05b-template-port-without-containerport": FAILED_VALIDATION,
    "05c-template-metadata-not-an-object": FAILED_VALIDATION,
    "06-template-env-map-accepted": FAILED_VALIDATION,
    "07-name-not-a-string": BAD_REQUEST,
    "08-status-condition-without-type": VALID,
    "08b-status-starttime-without-zone": VALID,
    "11-falsy-restartpolicy-accepted": FAILED_VALIDATION,
    "12-observed-pod-status-not-an-object": BAD_REQUEST,
    "14-status-completed-indexes-range": VALID,
    "generated/01-invalid-child-service-duplicate-port-protocol": VALID,
    "generated/02-5xx-500-typeerror-hooks-spec-py-284-check-names": BAD_REQUEST,
    "generated/03-5xx-parent-name-type-500-typeerror-hooks-spec-py-284-check-n": BAD_REQUEST,
    "generated/04-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/06-5xx-500-overflowerror-hooks-lifecycle-py-253-deadline": FAILED_VALIDATION,
    "generated/09-accepted-invalid-spec-pod-namespace-invalid": BAD_REQUEST,
    "generated/11-invalid-child-service-duplicate-port-name": FAILED_VALIDATION,  # as 04b
    "generated/12-5xx-500-attributeerror-hooks-lifecycle-py-77-init": VALID,
    "generated/13-5xx-500-attributeerror-hooks-sync-py-139-invalid-spec": FAILED_VALIDATION,
    "generated/14-5xx-500-keyerror-hooks-conditions-py-68-listcomp": FAILED_VALIDATION,
    "generated/15-no-error-reported-runpolicy": VALID,
    "generated/16-5xx-500-attributeerror-hooks-sync-py-142-invalid-spec": SPEC_ERROR,
    "generated/17-no-error-reported-type-restartpolicy": VALID,
    "generated/18-5xx-500-keyerror-hooks-sync-py-46-listcomp": SPEC_ERROR,  # a Service outside the layout, as 03
    "generated/20-5xx-big-number-500-overflowerror-hooks-lifecycle-py-253-dead": FAILED_VALIDATION,
    "generated/21-5xx-500-typeerror-hooks-lifecycle-py-242-genexpr": VALID,
    "generated/22-5xx-500-typeerror-hooks-conditions-py-27-init": FAILED_VALIDATION,
    "generated/23-5xx-500-attributeerror-hooks-lifecycle-py-89-dictcomp": VALID,
    "generated/25-5xx-500-attributeerror-hooks-lifecycle-py-88-dictcomp": VALID,
    "generated/28-5xx-500-attributeerror-hooks-lifecycle-py-84-init": VALID,
    "generated/29-accepted-invalid-spec-pod-env-entry-not-object": FAILED_VALIDATION,
    "generated/30-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/31-accepted-invalid-spec-pod-containerport-invalid": FAILED_VALIDATION,
    "generated/32-accepted-invalid-spec-pod-env-name-invalid": FAILED_VALIDATION,
    "generated/33-5xx-500-typeerror-hooks-env-py-63-listcomp": FAILED_VALIDATION,
    "generated/34-5xx-500-valueerror-hooks-conditions-py-20-parse-rfc3339": VALID,
    "generated/35-5xx-500-attributeerror-hooks-children-py-29-pod-for": FAILED_VALIDATION,
    "generated/36-5xx-child-object-wrong-shape-500-attributeerror-hooks-observ": BAD_REQUEST,
    "generated/37-5xx-500-valueerror-hooks-children-py-68-listcomp": FAILED_VALIDATION,
    "generated/38-5xx-500-typeerror-hooks-env-py-62-merge-env": FAILED_VALIDATION,
    "generated/39-5xx-child-object-wrong-shape-500-attributeerror-hooks-observ": BAD_REQUEST,
    "generated/40-5xx-500-attributeerror-hooks-conditions-py-20-parse-rfc3339": VALID,
    "generated/41-5xx-500-typeerror-hooks-children-py-68-listcomp": FAILED_VALIDATION,
    # A wrong shape in an observed pod's env, which the layout guard reads (DMLC_NUM_*): malformed.
    "generated/42-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/43-5xx-500-typeerror-hooks-children-py-29-pod-for": FAILED_VALIDATION,
    "generated/44-accepted-invalid-spec-pod-label-invalid": FAILED_VALIDATION,
    "generated/45-accepted-invalid-spec-pod-port-name-invalid": FAILED_VALIDATION,
    "generated/46-accepted-invalid-spec-pod-port-protocol-invalid": FAILED_VALIDATION,
    "generated/47-5xx-500-overflowerror-hooks-lifecycle-py-253-deadline": VALID,
    "generated/48-accepted-invalid-spec-pod-env-value-not-string": FAILED_VALIDATION,
    # A wrong shape in an observed pod's env, which the layout guard reads (DMLC_NUM_*): malformed.
    "generated/49-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/50-5xx-500-keyerror-hooks-children-py-42-listcomp": FAILED_VALIDATION,
    "generated/51-5xx-500-typeerror-hooks-lifecycle-py-59-decide": VALID,
    "generated/52-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/53-5xx-500-typeerror-hooks-sync-py-75-genexpr": FAILED_VALIDATION,
    "generated/54-5xx-500-keyerror-hooks-children-py-41-listcomp": FAILED_VALIDATION,
    # A wrong shape in an observed pod's env, which the layout guard reads (DMLC_NUM_*): malformed.
    "generated/55-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": BAD_REQUEST,
    "generated/56-accepted-invalid-spec-pod-container-name-invalid": FAILED_VALIDATION,
    "generated/57-accepted-invalid-spec-pod-port-not-object": FAILED_VALIDATION,
    "generated/58-5xx-child-object-wrong-shape-500-typeerror-hooks-observed-py": BAD_REQUEST,
    "generated/59-5xx-500-valueerror-hooks-children-py-32-pod-for": FAILED_VALIDATION,
    "generated/60-5xx-500-typeerror-hooks-children-py-32-pod-for": FAILED_VALIDATION,
    "generated/61-accepted-invalid-spec-pod-annotations-not-string-map": FAILED_VALIDATION,
    "generated/62-5xx-child-object-wrong-shape-500-attributeerror-hooks-sync-p": SPEC_ERROR,
    "generated/63-accepted-invalid-spec-pod-ports-not-list": FAILED_VALIDATION,
    "generated/64-accepted-invalid-spec-service-port-number-invalid": SPEC_ERROR,
    "generated/65-accepted-invalid-spec-service-targetport-invalid": SPEC_ERROR,
    "generated/70-5xx-child-object-wrong-shape-500-keyerror-hooks-sync-py-46-l": BAD_REQUEST,
    # A port protocol that is a list (or an object) crashed the Service port check with a 500.
    "turn3/01-port-protocol-list-500": FAILED_VALIDATION,
    "turn3/01b-port-protocol-list-500-on-running-job": SPEC_ERROR,
    # Turn 3: a layout edit (2 workers to 1) while pods run is refused whatever the request shows of
    # the job having started, not only when the cluster ConfigMap is observed: every child kept.
    "turn3/02-layout-edit-configmap-deleted-drops-running-pod": SPEC_ERROR,
    "turn3/02a-layout-edit-configmap-observed-control": SPEC_ERROR,
    # No ConfigMap child rule: a 400 since issue 29 (nothing is deleted either way).
    "turn3/02b-layout-edit-no-configmap-rule-drops-running-pod": BAD_REQUEST,
    "turn3/02c-layout-edit-configmap-terminating-drops-running-pod": SPEC_ERROR,
    "turn3/02d-upgrade-refused-edit-applied-drops-running-pod": SPEC_ERROR,
    # Issue 29 (found at d552d2e): an invalid edit read with a stale status (01) or with no status
    # (01m) answered the stale status; with the outcome record observed, the status is the record's.
    "d552d2e/01-invalid-edit-stale-status-finished-job-shown-running": SPEC_ERROR,
    "d552d2e/01a-invalid-edit-fresh-status-control": SPEC_ERROR,
    "d552d2e/01b-stale-status-valid-spec-control": VALID,
    "d552d2e/01m-minimal-invalid-spec-no-status-outcome-record": SPEC_ERROR,
    # An MXTune layout edit with the cluster ConfigMap not observed and the removed replica's pod
    # terminating: its live Service shows the old layout (02b), as the ConfigMap does (02a). 02 has
    # no ConfigMap rule at all: a 400 (as 03).
    "d552d2e/02-mxtune-layout-edit-no-configmap-rule-deletes-live-service": BAD_REQUEST,
    "d552d2e/02a-mxtune-layout-edit-configmap-observed-control": SPEC_ERROR,
    "d552d2e/02b-mxtune-layout-edit-configmap-deleted-deletes-live-service": SPEC_ERROR,
    # Without the ConfigMap child rule the records were never seen: a failed pod never recreated (03),
    # a finished job never cleaned up (03b). Now a 400 naming the rule; with it (03a, 03c) as before.
    "d552d2e/03-no-configmap-rule-failed-pod-never-recreated": BAD_REQUEST,
    "d552d2e/03a-configmap-rule-control-failed-pod-recreated": VALID,
    "d552d2e/03b-no-configmap-rule-failed-job-pods-never-cleaned-up": BAD_REQUEST,
    "d552d2e/03c-configmap-rule-control-failed-job-cleaned-up": VALID,
    # Issue 40 (found at ba76303): a job failed by backoffLimit whose message named no pod; what each
    # message says now is tests/mxjob/test_failure_messages.py's.
    "ba76303/01-backoff-limit-preempted-pod-failed-message-names-no-pod": VALID,
    "ba76303/01e-after-cleanup-nothing-says-why": VALID,
    "ba76303/01m-minimal-backoff-limit-evicted-pod-not-named": VALID,
    "ba76303/02-whole-job-restart-over-backoff-limit-names-no-pod": VALID,
    "ba76303/02a-control-same-loss-over-maxrestarts-names-pod-and-cause": VALID,
    "ba76303/03-backoff-limit-oomkilled-pod-message-without-reason": VALID,
    "ba76303/03a-control-never-policy-names-code-reason-and-line": VALID,
}

# A status field the hook did not write in its own shape: ignored, and named in statusWarnings.
WARNED = {
    "08-status-condition-without-type": "status.conditions[1]",
    "08b-status-starttime-without-zone": "status.startTime",
    "14-status-completed-indexes-range": "status.replicaStatuses.Worker.completedIndexes",
    "generated/12-5xx-500-attributeerror-hooks-lifecycle-py-77-init": "status ",
    "generated/21-5xx-500-typeerror-hooks-lifecycle-py-242-genexpr": "status.restartHistory[p]",
    "generated/13-5xx-500-attributeerror-hooks-sync-py-139-invalid-spec": "status ",
    "generated/14-5xx-500-keyerror-hooks-conditions-py-68-listcomp": "status.conditions[0]",
    "generated/16-5xx-500-attributeerror-hooks-sync-py-142-invalid-spec": "status ",
    "generated/22-5xx-500-typeerror-hooks-conditions-py-27-init": "status.conditions ",
    "generated/23-5xx-500-attributeerror-hooks-lifecycle-py-89-dictcomp":
        "status.replicaStatuses.Scheduler",
    "generated/25-5xx-500-attributeerror-hooks-lifecycle-py-88-dictcomp": "status.replicaStatuses ",
    "generated/28-5xx-500-attributeerror-hooks-lifecycle-py-84-init": "status.restartHistory ",
    "generated/34-5xx-500-valueerror-hooks-conditions-py-20-parse-rfc3339": "status.startTime",
    "generated/40-5xx-500-attributeerror-hooks-conditions-py-20-parse-rfc3339": "status.startTime",
    "generated/51-5xx-500-typeerror-hooks-lifecycle-py-59-decide": "status.startTime",
}


# Malformed bodies the shell refuses before any core runs: tests/server/test_fuzz_repro_shell.py.
SHELL_LEVEL = {"09-deep-nesting", "09b-deep-nesting-in-template", "10-nan-literal", "13-chunked-over-limit"}
GENERATED_SHELL_LEVEL = [*GENERATED_MALFORMED, *GENERATED_CHUNKED]


def dumps(value) -> str:
    return json.dumps(value, sort_keys=True)


def post(body: bytes):
    return create_app().test_client().post("/sync", data=body, content_type="application/json")


def test_every_reproducer_has_an_expected_answer():
    on_disk = {str(p.relative_to(HERE)).rsplit(".", 1)[0] for p in [*HERE.rglob("*.json"), *HERE.rglob("*.body")]
               if not p.name.endswith(".meta.json")}
    assert on_disk == set(EXPECTED) | SHELL_LEVEL | {f"generated/{n.rsplit('.', 1)[0]}" for n in GENERATED_SHELL_LEVEL}


# The bodies of the first fuzz runs carry no `ConfigMap.v1` entry (their generator knew only the Pod
# and Service rules). Since issue 29 a request without it is a 400 (the CompositeController lacks the
# ConfigMap child rule: test_a_request_without_the_config_map_rule_is_refused_and_names_the_fix), so
# they are sent with an empty entry, as a CompositeController with the rule sends them, and keep
# testing what they were found for. These bodies are about the missing rule, and are sent as they are:
SENT_AS_THEY_ARE = {
    "turn3/02b-layout-edit-no-configmap-rule-drops-running-pod",
    "d552d2e/02-mxtune-layout-edit-no-configmap-rule-deletes-live-service",
    "d552d2e/03-no-configmap-rule-failed-pod-never-recreated",
    "d552d2e/03b-no-configmap-rule-failed-job-pods-never-cleaned-up",
}


def body_of(name: str) -> bytes:
    """A reproducer's body as the test sends it (see SENT_AS_THEY_ARE)."""
    body = (HERE / f"{name}.json").read_bytes()
    request = json.loads(body)
    children = request.get("children") if isinstance(request, dict) else None
    if name in SENT_AS_THEY_ARE or not isinstance(children, dict) or "ConfigMap.v1" in children:
        return body
    return json.dumps({**request, "children": {**children, "ConfigMap.v1": {}}}).encode()


@pytest.mark.parametrize("name", EXPECTED, ids=EXPECTED)
def test_reproducer_gets_the_answer_the_rule_says(admission, name):
    body = body_of(name)
    request = json.loads(body)
    response = post(body)
    expected = EXPECTED[name]
    if expected == BAD_REQUEST:
        assert response.status_code == 400, response.get_data(as_text=True)[:300]
        error = response.get_json()["error"]
        # The core names the field ("parent.…", "children[…]…"); the shell's decoder gives its path.
        assert error.startswith(("parent.", "children[", "request body has the wrong shape")), error
        return
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    answer = response.get_json()
    status, children = answer["status"], answer["children"]
    reasons = [c.get("reason") for c in status.get("conditions", [])]
    if expected == FAILED_VALIDATION:
        assert children == []
        assert reasons[-1] == "MXJobFailedValidation"
        assert "has an invalid spec: spec" in status["conditions"][-1]["message"]
    elif expected == SPEC_ERROR:
        observed = {(kind.split(".")[0], name) for kind, objs in request["children"].items()
                    for name in objs}
        assert {(c["kind"], c["metadata"]["name"]) for c in children} == observed
        assert "has an invalid spec: spec" in status["specError"]
    else:
        assert "MXJobFailedValidation" not in reasons and "specError" not in status
        if admission is not None:
            assert admission.refusals(children) == []  # the real API server's verdict
    if name in WARNED:
        assert any(w.startswith(WARNED[name]) for w in status["statusWarnings"]), status
    else:
        assert "statusWarnings" not in status
    # The core, at a fixed time: deterministic, and the status it writes is read back unchanged.
    first = sync_mxjob(request, now=T0)
    assert dumps(sync_mxjob(request, now=T0)) == dumps(first)
    request["parent"]["status"] = first["status"]
    assert dumps(sync_mxjob(request, now=T0)["status"]) == dumps(first["status"])


def test_a_service_of_no_slot_is_a_sign_of_another_layout_and_nothing_is_deleted():
    # Only a slot of some layout gets a Service, so one outside the spec's slots shows the job was
    # started with another layout: refused as a pod outside the layout is, with every child kept.
    answer = post(body_of("03-finished-job-stray-service")).get_json()
    assert [(c["kind"], c["metadata"]["name"]) for c in answer["children"]] == [("Pod", "j-worker-0"),
                                                                                ("Service", "j-worker-5")]
    assert "changed after the job's pods were created" in answer["status"]["specError"]
    # Once it has gone, the job goes on, and ends as its pods say.
    request = json.loads(body_of("03-finished-job-stray-service"))
    request["children"]["Service.v1"]["j-worker-5"]["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    answer = sync_mxjob(request, now=T0)
    assert [(c["kind"], c["metadata"]["name"]) for c in answer["children"]] == [("Pod", "j-worker-0"), ("ConfigMap", "j-cluster"),
                                                                                ("ConfigMap", "j-outcome")]
    assert answer["status"]["conditions"][-1]["type"] == "Succeeded"


# --- issue 29: the memory records (tests/fuzz_repro/d552d2e/README.md) ------------------------------

D552 = "d552d2e/"


def today(name: str) -> tuple[int, dict]:
    """The answer a reproducer got at d552d2e: its .answer.txt (status line, then the body)."""
    line, body = (HERE / f"{D552}{name}.answer.txt").read_text().split("\n", 1)
    return int(line.split()[1]), json.loads(body)


def answer_of(name: str) -> tuple[int, dict]:
    response = post((HERE / f"{D552}{name}.json").read_bytes())
    return response.status_code, response.get_json()


def identities(answer: dict) -> list[tuple[str, str]]:
    return sorted((c["kind"], c["metadata"]["name"]) for c in answer["children"])


def test_an_invalid_edit_read_with_a_stale_status_answers_the_outcome_records_status():
    # 01: the job failed and its outcome record is observed; the parent shows the status of two
    # writes earlier (Running) and a spec edited past admission. 01b: the same read, spec unchanged.
    _, edited = answer_of("01-invalid-edit-stale-status-finished-job-shown-running")
    _, unchanged = answer_of("01b-stale-status-valid-spec-control")
    assert edited["status"].pop("specError").startswith("MXJob default/j has an invalid spec: spec.mxReplicaSpecs")
    assert edited["status"] == unchanged["status"]
    assert edited["status"]["conditions"][-1]["type"] == "Failed"
    assert edited["status"]["replicaStatuses"] == {"Worker": {"active": 0, "succeeded": 0, "failed": 1}}
    # Nothing is touched: every child is kept as last applied.
    assert identities(edited) == [("ConfigMap", "j-cluster"), ("ConfigMap", "j-outcome"),
                                  ("Pod", "j-worker-1"), ("Service", "j-worker-1")]


def test_an_invalid_spec_with_no_status_answers_the_outcome_records_status():
    request = json.loads((HERE / f"{D552}01m-minimal-invalid-spec-no-status-outcome-record.json").read_bytes())
    record = json.loads(request["children"]["ConfigMap.v1"]["jic72-outcome"]["data"]["record"])
    _, answer = answer_of("01m-minimal-invalid-spec-no-status-outcome-record")
    assert answer["status"].pop("specError").startswith("MXJob default/jic72 has an invalid spec: spec:")
    assert answer["status"] == record
    assert identities(answer) == [("ConfigMap", "jic72-outcome")]


def test_an_mxtune_layout_edit_is_refused_by_the_live_service_of_the_removed_replica():
    # 02b: t-tunerserver-1 is terminating (a node drain) and t-cluster is not observed; the edit
    # (TunerServer 2 to 1) deleted the live Service t-tunerserver-1 and wrote a one-server cluster
    # map under the running tuner. Now it is refused as with t-cluster observed (02a).
    _, answer = answer_of("02b-mxtune-layout-edit-configmap-deleted-deletes-live-service")
    assert answer["status"]["specError"].startswith("MXJob default/t has an invalid spec: spec.mxReplicaSpecs: changed")
    request = json.loads((HERE / f"{D552}02b-mxtune-layout-edit-configmap-deleted-deletes-live-service.json").read_bytes())
    observed = sorted((key.split(".")[0], name) for key, objs in request["children"].items() for name in objs)
    assert ("Service", "t-tunerserver-1") in observed and "t-cluster" not in request["children"]["ConfigMap.v1"]
    assert identities(answer) == observed
    _, control = answer_of("02a-mxtune-layout-edit-configmap-observed-control")
    assert control["status"]["specError"] == answer["status"]["specError"]
    code, no_rule = answer_of("02-mxtune-layout-edit-no-configmap-rule-deletes-live-service")
    assert code == 400 and no_rule["error"].startswith("children[ConfigMap.v1]: required")


@pytest.mark.parametrize("name", ["03-no-configmap-rule-failed-pod-never-recreated",
                                  "03b-no-configmap-rule-failed-job-pods-never-cleaned-up"])
def test_without_the_config_map_rule_the_job_is_not_left_to_stall_in_silence(name):
    code, answer = answer_of(name)
    assert code == 400
    assert answer["error"] == ("children[ConfigMap.v1]: required: the CompositeController has no child rule for "
                               "ConfigMap v1, which this hook needs; re-apply metacontroller/ (kubectl apply -k) "
                               "to install the shipped child rules")


def test_with_the_config_map_rule_the_failed_pod_is_deleted_and_the_failed_job_cleaned_up():
    _, restarting = answer_of("03a-configmap-rule-control-failed-pod-recreated")
    assert restarting["status"]["conditions"][-1]["type"] == "Restarting"
    new_pod = next(c for c in restarting["children"] if c["metadata"]["name"] == "r-worker-1")
    assert new_pod["metadata"]["labels"]["training.kubeflow.org/restart-attempt"] == "1"
    _, cleaned = answer_of("03c-configmap-rule-control-failed-job-cleaned-up")
    assert identities(cleaned) == [("ConfigMap", "s-outcome")]


@pytest.mark.parametrize("name", ["01a-invalid-edit-fresh-status-control", "01b-stale-status-valid-spec-control",
                                  "02a-mxtune-layout-edit-configmap-observed-control",
                                  "03a-configmap-rule-control-failed-pod-recreated",
                                  "03c-configmap-rule-control-failed-job-cleaned-up"])
def test_the_controls_keep_their_answer(name):
    # Since d552d2e a Restarting message says how each pod ended in the words every message uses
    # (hooks.shared.termination.how_it_ended): the old words are read as the new ones, in the
    # request's status and in the answer; nothing else of these answers changed.
    def reworded(text: str) -> str:
        return text.replace("failed without an exit code and is recreated", "ended with no exit code and is recreated")

    response = post(reworded((HERE / f"{D552}{name}.json").read_text()).encode())
    code, answer = response.status_code, response.get_json()
    was_code, was = today(name)
    was = json.loads(reworded(json.dumps(was)))
    assert (code, answer["status"], identities(answer)) == (was_code, was["status"], identities(was))


def without_config_map_rule() -> list[str]:
    """Every reproducer whose body has no `ConfigMap.v1` entry (a sync request, children a map)."""
    names = []
    for name in EXPECTED:
        request = json.loads((HERE / f"{name}.json").read_bytes())
        children = request.get("children") if isinstance(request, dict) else None
        if isinstance(children, dict) and "ConfigMap.v1" not in children and "Pod.v1" in children:
            names.append(name)
    return names


def test_a_request_without_the_config_map_rule_is_refused_and_names_the_fix():
    # Every body of the first fuzz runs, as it was sent: a CompositeController without the ConfigMap
    # rule would never show the hook its memory records, so the request is refused as one without
    # the Pod rule is, and nothing changes in the cluster.
    # (Those that are malformed anyway are refused for that first.)
    names = [name for name in without_config_map_rule() if EXPECTED[name] != BAD_REQUEST]
    assert len(names) > 40
    for name in names:
        response = post((HERE / f"{name}.json").read_bytes())
        assert response.status_code == 400, name
        error = response.get_json()["error"]
        assert error.startswith("children[ConfigMap.v1]: required: the CompositeController has no child rule "
                                "for ConfigMap v1"), (name, error)
        assert "re-apply metacontroller/" in error
