"""The CRDs' rules, differentially: every case of the emulation (tests/helpers/crd_cases.py, which
tests/install/test_crd.py, tests/install/test_chainerjob_crd.py and tests/install/test_crd_versions.py check with cel-python and
an OpenAPI validator) goes through the real API server, and the two verdicts must agree.

- A create is a dry-run create (with `fieldValidation=Strict`, so a field the schema would prune is
  refused too); an update creates the stored object for real in the test's namespace, then PUTs the
  new one with its resourceVersion as a dry run; a status write goes through the status subresource.
- A refusal must carry the same rule messages as the emulation's (the same set), the note that the
  rules were not run exactly when the emulation's has it, and every fragment its case lists.
- Ratcheting needs objects stored before the rules existed: a copy of the MXJob CRD in a group of
  its own (RATCHETING_GROUP) first without any value check (crd_cases.loosened), then as shipped.

Where the two disagreed, the real server was right, and the CRD or the emulation was fixed (the
cases stay); the emulation states what it models in tests/helpers/crd.py.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator, Sequence

import pytest
from helpers.apiserver import Verdict, apply_objects, create, install, refresh, update, update_status, wait_for
from helpers.crd import (
    BLOCKED_NOTE,
    CHAINERJOB_SCHEMA,
    CRD,
    RULES,
    SCHEMA,
    VALID,
    Rule,
    collect_rules,
    pruned_paths,
    refusals,
    status_refusals,
    with_field,
)
from helpers.crd_cases import (
    AGREEMENT_CASES,
    BLOCKED_RULES,
    CEL_ACCEPTS,
    CEL_REJECTS,
    CHAINERJOB_EXAMPLES,
    CHAINERJOB_SCHEMA_ACCEPTS,
    CHAINERJOB_SCHEMA_REJECTS,
    KUEUE_UPDATE_ACCEPTS,
    RATCHET_STATUS_WRITES,
    RATCHET_UPDATES,
    REPRESENTATIVE_STATUS,
    SCHEMA_ACCEPTS,
    SCHEMA_REJECTS,
    SCHEMA_REQUIRES,
    STATUS_REJECTS,
    UNBLOCKED_RULES,
    UPDATE_ACCEPTS,
    UPDATE_REJECTS,
    VERSION_CASES,
    VERSION_CREATE_REJECTS,
    VERSION_UPDATE_REJECTS,
    ZERO_WORKERS,
    chainerjob_with,
    edited,
    load_version_case,
    load_yaml,
    loosened,
    without,
)

from localcluster.controlplane.processes import ControlPlane

pytestmark = pytest.mark.apiserver

RATCHETING_GROUP = "ratcheting.mxjob.test"
RULE_MESSAGES = {r.message for r in RULES}


@pytest.fixture(scope="module")
def cp(control_plane: ControlPlane) -> ControlPlane:
    install(control_plane)
    return control_plane


@pytest.fixture(scope="module")
def dry_runs(cp: ControlPlane) -> Iterator[str]:
    """A namespace for the dry-run creates, which store nothing, so one serves them all."""
    name = f"t-dry-{uuid.uuid4().hex[:8]}"
    cp.kubectl("create", "namespace", name)
    yield name
    cp.kubectl("delete", "namespace", name, "--wait=false", check=False)


def emulated(obj: dict, old: dict | None = None, *, schema: dict = SCHEMA) -> list[str]:
    """The emulation's answer to a Strict write: its refusals, and every field the schema would prune.

    (The older MXJob versions have v1's schema, one YAML alias: tests/install/test_crd_versions.py.)
    """
    rules = RULES if schema is SCHEMA else list(collect_rules(schema))
    return refusals(obj, old, schema=schema, rules=rules) + [f"unknown field {p}" for p in pruned_paths(obj, schema)]


def agree(expected: bool, emulation: list[str], verdict: Verdict, fragments: Sequence[str] = ()) -> None:
    """The server accepted the write as the case expects, and the emulation says the same: accepted,
    or refused for the same rules."""
    said = verdict.message or "accepted"
    assert verdict.accepted is expected, f"the case expects {'acceptance' if expected else 'a refusal'}; server: {said}"
    assert verdict.accepted is (emulation == []), f"server: {said}\nemulation: {emulation}"
    if verdict.accepted:
        return
    assert {m for m in RULE_MESSAGES if m in verdict.message} == {m for m in emulation if m in RULE_MESSAGES}, said
    assert (BLOCKED_NOTE in verdict.message) is (BLOCKED_NOTE in emulation), said
    for fragment in fragments:
        assert fragment in verdict.message, f"{fragment!r} not in the server's answer: {said}"


def with_defaults(spec: dict) -> dict:
    """spec as the server stores it: the CRD's two defaults filled in."""
    return {"jobMode": "MXTrain", "runPolicy": {}, **spec}


def dry_create(cp: ControlPlane, namespace: str, obj: dict) -> Verdict:
    return create(cp, obj, namespace, dry_run=True, field_validation="Strict")


def put(cp: ControlPlane, namespace: str, stored: dict, new: dict) -> Verdict:
    """Create stored for real, then PUT new over it as a dry run."""
    created = create(cp, stored, namespace)
    assert created.accepted, created.message
    assert created.stored is not None
    new = copy.deepcopy(new)
    new["metadata"]["resourceVersion"] = created.stored["metadata"]["resourceVersion"]
    return update(cp, new, namespace, dry_run=True, field_validation="Strict")


# ---------------------------------------------------------------------------------------------
# The CRDs themselves: accepted, with every rule (none dropped, none over the cost budget)


def server_rules(cp: ControlPlane, name: str) -> dict[str, list[tuple[tuple[str, ...], str, str]]]:
    crd = cp.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True" and conditions["NamesAccepted"] == "True", conditions
    return {v["name"]: [(r.path, r.source, r.message) for r in collect_rules(v["schema"]["openAPIV3Schema"])]
            for v in crd["spec"]["versions"]}


def test_the_server_holds_the_mxjob_crd_with_every_rule_in_every_version(cp):
    ours = [(r.path, r.source, r.message) for r in RULES]
    assert len(ours) == 12
    assert server_rules(cp, "mxjobs.kubeflow.org") == {v["name"]: ours for v in CRD["spec"]["versions"]}


def test_the_server_holds_the_chainerjob_crd(cp):
    assert server_rules(cp, "chainerjobs.kubeflow.org") == {"v1alpha1": []}


def _refusing_case(rule: Rule) -> tuple[str, dict, dict | None]:
    """A case the emulation refuses with this rule: (fragment, object, stored object or None)."""
    for obj, fragments in CEL_REJECTS.values():
        for fragment in fragments:
            if fragment in rule.message:
                return fragment, obj, None
    for stored, new, fragments in UPDATE_REJECTS.values():
        for fragment in fragments:
            if fragment in rule.message:
                return fragment, new, stored
    raise AssertionError(f"no case refuses with {rule}")


def _slug(text: str) -> str:
    return "-".join(text.lower().replace(",", "").replace(".", "").split())


RULE_CASES = {f"{version['name']}-{_slug(fragment)}": (version["name"], rule, obj, stored)
              for version in CRD["spec"]["versions"]
              for rule in RULES
              for fragment, obj, stored in [_refusing_case(rule)]}


@pytest.mark.parametrize("version,rule,obj,stored", RULE_CASES.values(), ids=RULE_CASES.keys())
def test_every_rule_refuses_with_its_message(cp, dry_runs, request, version, rule, obj, stored):
    # The CRD was accepted, so each rule compiled within the cost budget; this shows each one runs.
    obj = {**copy.deepcopy(obj), "apiVersion": f"kubeflow.org/{version}"}
    if stored is None:
        verdict = dry_create(cp, dry_runs, obj)
    else:
        verdict = put(cp, request.getfixturevalue("namespace"), {**stored, "apiVersion": f"kubeflow.org/{version}"}, obj)
    assert not verdict.accepted and rule.message in verdict.message, verdict.message


# ---------------------------------------------------------------------------------------------
# MXJob: the OpenAPI schema


@pytest.mark.parametrize("dotted,value", SCHEMA_REJECTS.values(), ids=SCHEMA_REJECTS.keys())
def test_schema_rejects(cp, dry_runs, dotted, value):
    obj = with_field(VALID, dotted, value)
    agree(False, emulated(obj), dry_create(cp, dry_runs, obj))


@pytest.mark.parametrize("dotted,value", SCHEMA_ACCEPTS.values(), ids=SCHEMA_ACCEPTS.keys())
def test_schema_accepts(cp, dry_runs, dotted, value):
    obj = with_field(VALID, dotted, value)
    assert_admitted_as_sent(cp, dry_runs, obj)


@pytest.mark.parametrize("path", SCHEMA_REQUIRES.values(), ids=SCHEMA_REQUIRES.keys())
def test_schema_requires(cp, dry_runs, path):
    obj = without(VALID, path)
    agree(False, emulated(obj), dry_create(cp, dry_runs, obj), ["Required value"])



def assert_admitted_as_sent(cp, dry_runs, obj):
    """The server and the emulation both admit obj, and the server stores its spec as sent (defaults aside)."""
    verdict = dry_create(cp, dry_runs, obj)
    agree(True, emulated(obj), verdict)
    assert verdict.stored is not None and verdict.stored["spec"] == with_defaults(obj["spec"]), "stored as sent"

# ---------------------------------------------------------------------------------------------
# MXJob: the rules on create


@pytest.mark.parametrize("obj", CEL_ACCEPTS.values(), ids=CEL_ACCEPTS.keys())
def test_cel_accepts(cp, dry_runs, obj):
    assert_admitted_as_sent(cp, dry_runs, obj)


@pytest.mark.parametrize("obj,fragments", CEL_REJECTS.values(), ids=CEL_REJECTS.keys())
def test_cel_rejects(cp, dry_runs, obj, fragments):
    agree(False, emulated(obj), dry_create(cp, dry_runs, obj), fragments)


BLOCKING_CASES = {**BLOCKED_RULES, **UNBLOCKED_RULES}


@pytest.mark.parametrize("obj,fragments", BLOCKING_CASES.values(), ids=BLOCKING_CASES.keys())
def test_which_schema_errors_stop_the_rules(cp, dry_runs, obj, fragments):
    agree(False, emulated(obj), dry_create(cp, dry_runs, obj), fragments)


@pytest.mark.parametrize("obj,valid", AGREEMENT_CASES.values(), ids=AGREEMENT_CASES.keys())
def test_the_server_admits_what_the_hook_accepts(cp, dry_runs, obj, valid):
    verdict = dry_create(cp, dry_runs, obj)
    agree(valid, emulated(obj), verdict)


# ---------------------------------------------------------------------------------------------
# MXJob: updates

UPDATES_ACCEPTED = {**UPDATE_ACCEPTS, **KUEUE_UPDATE_ACCEPTS}


@pytest.mark.parametrize("stored,new", UPDATES_ACCEPTED.values(), ids=UPDATES_ACCEPTED.keys())
def test_update_accepted(cp, namespace, stored, new):
    agree(True, emulated(new, stored), put(cp, namespace, stored, new))


@pytest.mark.parametrize("stored,new,fragments", UPDATE_REJECTS.values(), ids=UPDATE_REJECTS.keys())
def test_update_rejected(cp, namespace, stored, new, fragments):
    agree(False, emulated(new, stored), put(cp, namespace, stored, new), fragments)


# ---------------------------------------------------------------------------------------------
# MXJob: the status subresource


def write_status(cp: ControlPlane, namespace: str, status: dict) -> tuple[dict, Verdict]:
    created = create(cp, VALID, namespace)
    assert created.accepted and created.stored is not None, created.message
    return created.stored, update_status(cp, {**created.stored, "status": status}, namespace, dry_run=True,
                                         field_validation="Strict")


def test_status_the_hook_writes_is_stored_as_written(cp, namespace):
    stored, verdict = write_status(cp, namespace, REPRESENTATIVE_STATUS)
    agree(True, status_refusals({**stored, "status": REPRESENTATIVE_STATUS}, stored), verdict)
    assert verdict.stored is not None and verdict.stored["status"] == REPRESENTATIVE_STATUS


@pytest.mark.parametrize("field,value", STATUS_REJECTS.values(), ids=STATUS_REJECTS.keys())
def test_status_rejects(cp, namespace, field, value):
    status = {**REPRESENTATIVE_STATUS, field: value}
    stored, verdict = write_status(cp, namespace, status)
    agree(False, status_refusals({**stored, "status": status}, stored), verdict)


# ---------------------------------------------------------------------------------------------
# MXJob: ratcheting, on objects stored before the rules


def regrouped(crd: dict, group: str) -> dict:
    """The CRD for another API group, so it can change without touching the one the other tests use."""
    crd = copy.deepcopy(crd)
    names = {k: v for k, v in crd["spec"]["names"].items() if k not in ("shortNames", "categories")}
    crd["spec"].update(group=group, names=names)
    crd["metadata"] = {"name": f"{names['plural']}.{group}"}
    return crd


def in_group(obj: dict, name: str) -> dict:
    obj = copy.deepcopy(obj)
    obj["apiVersion"] = f"{RATCHETING_GROUP}/v1"
    obj["metadata"]["name"] = name
    return obj


@pytest.fixture(scope="module")
def stored_before_the_rules(cp: ControlPlane) -> Iterator[tuple[str, dict[str, dict]]]:
    """(namespace, {case: the object as stored}): every ratcheting case's object, stored under the
    loosened CRD, which then becomes the CRD as shipped."""
    shipped = regrouped(CRD, RATCHETING_GROUP)
    loose = copy.deepcopy(shipped)
    for version in loose["spec"]["versions"]:
        version["schema"] = loosened(version["schema"])
    name = f"t-ratchet-{uuid.uuid4().hex[:8]}"
    apply_objects(cp, [loose])
    cp.wait_established(shipped["metadata"]["name"])
    refresh(cp)
    cp.kubectl("create", "namespace", name)
    stored: dict[str, dict] = {}
    objects = {**{f"u-{case}": obj for case, (obj, _, _) in RATCHET_UPDATES.items()},
               **{f"s-{case}": obj for case, (obj, _) in RATCHET_STATUS_WRITES.items()}}
    try:
        for key, obj in objects.items():
            verdict = create(cp, in_group(obj, key), name)
            assert verdict.accepted and verdict.stored is not None, verdict.message
            stored[key] = verdict.stored
        apply_objects(cp, [shipped])
        wait_for(lambda: not create(cp, in_group(ZERO_WORKERS, "probe"), name, dry_run=True).accepted,
                 "the shipped rules in force")
        yield name, stored
    finally:
        cp.kubectl("delete", "namespace", name, "--wait=false", check=False)
        cp.kubectl("delete", "crd", shipped["metadata"]["name"], "--wait=false", check=False)
        refresh(cp)


@pytest.mark.parametrize("stored,edit,fragments", RATCHET_UPDATES.values(), ids=RATCHET_UPDATES.keys())
def test_ratcheting_on_update(cp, stored_before_the_rules, request, stored, edit, fragments):
    namespace, on_server = stored_before_the_rules
    case = request.node.callspec.id
    kept = on_server[f"u-{case}"]
    refused_now = create(cp, in_group(stored, "again"), namespace, dry_run=True)
    agree(False, emulated(stored), refused_now)  # the stored object breaks the CRD as shipped
    verdict = update(cp, edited(kept, edit), namespace, dry_run=True, field_validation="Strict")
    agree(fragments is None, emulated(edited(stored, edit), stored), verdict, fragments or [])


@pytest.mark.parametrize("stored,status", RATCHET_STATUS_WRITES.values(), ids=RATCHET_STATUS_WRITES.keys())
def test_a_job_stored_before_a_rule_takes_status_writes(cp, stored_before_the_rules, request, stored, status):
    namespace, on_server = stored_before_the_rules
    kept = on_server[f"s-{request.node.callspec.id}"]
    verdict = update_status(cp, {**kept, "status": status}, namespace, dry_run=True, field_validation="Strict")
    agree(True, status_refusals({**stored, "status": status}, stored), verdict)
    assert verdict.stored is not None and verdict.stored["status"] == status


# ---------------------------------------------------------------------------------------------
# MXJob: the older served versions


VERSION_DOCS = {f"{path.stem}-{doc['apiVersion'].rsplit('/', 1)[1]}": doc
                for path in VERSION_CASES for doc in load_version_case(path)}


@pytest.mark.parametrize("doc", VERSION_DOCS.values(), ids=VERSION_DOCS.keys())
def test_each_version_admits_its_manifests(cp, dry_runs, doc):
    assert_admitted_as_sent(cp, dry_runs, doc)


@pytest.mark.parametrize("stored,new,fragments", VERSION_UPDATE_REJECTS.values(), ids=VERSION_UPDATE_REJECTS.keys())
def test_old_versions_keep_the_immutability_rules(cp, namespace, stored, new, fragments):
    agree(False, emulated(new, stored), put(cp, namespace, stored, new), fragments)


@pytest.mark.parametrize("obj,fragments", VERSION_CREATE_REJECTS.values(), ids=VERSION_CREATE_REJECTS.keys())
def test_old_versions_reject_what_v1_rejects(cp, dry_runs, obj, fragments):
    agree(False, emulated(obj), dry_create(cp, dry_runs, obj), fragments)


# ---------------------------------------------------------------------------------------------
# ChainerJob (no rules: its schema alone)


@pytest.mark.parametrize("dotted,value", CHAINERJOB_SCHEMA_REJECTS.values(), ids=CHAINERJOB_SCHEMA_REJECTS.keys())
def test_chainerjob_schema_rejects(cp, dry_runs, dotted, value):
    doc = chainerjob_with(dotted, value)
    agree(False, emulated(doc, schema=CHAINERJOB_SCHEMA), dry_create(cp, dry_runs, doc))


CHAINERJOB_ACCEPTS = {**{f"example-{p.name}": load_yaml(p) for p in CHAINERJOB_EXAMPLES},
                      **{k: chainerjob_with(*v) for k, v in CHAINERJOB_SCHEMA_ACCEPTS.items()}}


@pytest.mark.parametrize("doc", CHAINERJOB_ACCEPTS.values(), ids=CHAINERJOB_ACCEPTS.keys())
def test_chainerjob_schema_accepts(cp, dry_runs, doc):
    verdict = dry_create(cp, dry_runs, doc)
    agree(True, emulated(doc, schema=CHAINERJOB_SCHEMA), verdict)
    assert verdict.stored is not None and verdict.stored["spec"] == doc["spec"], "stored as sent"
