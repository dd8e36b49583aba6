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

HERE = Path(__file__).resolve().parent / "fuzz_repro"
VALID, FAILED_VALIDATION, SPEC_ERROR, BAD_REQUEST = "valid", "failed-validation", "spec-error", "400"

EXPECTED = {
    "01-huge-replicas": FAILED_VALIDATION,
    "02-deadline-int64-max": FAILED_VALIDATION,
    "03-finished-job-stray-service": VALID,
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
    "generated/18-5xx-500-keyerror-hooks-sync-py-46-listcomp": VALID,
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
    "turn3/02b-layout-edit-no-configmap-rule-drops-running-pod": SPEC_ERROR,
    "turn3/02c-layout-edit-configmap-terminating-drops-running-pod": SPEC_ERROR,
    "turn3/02d-upgrade-refused-edit-applied-drops-running-pod": SPEC_ERROR,
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


# Malformed bodies the shell refuses before any core runs: tests/test_fuzz_repro_shell.py.
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


@pytest.mark.parametrize("name", EXPECTED, ids=EXPECTED)
def test_reproducer_gets_the_answer_the_rule_says(admission, name):
    body = (HERE / f"{name}.json").read_bytes()
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


def test_a_finished_jobs_service_of_no_slot_is_deleted_and_the_rest_kept():
    answer = post((HERE / "03-finished-job-stray-service.json").read_bytes()).get_json()
    assert [(c["kind"], c["metadata"]["name"]) for c in answer["children"]] == [("Pod", "j-worker-0"), ("ConfigMap", "j-cluster"),
                                                                                ("ConfigMap", "j-outcome")]
    assert answer["status"]["conditions"][-1]["type"] == "Succeeded"
