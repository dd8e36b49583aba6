"""The gang-scheduling kustomize components: the kustomizations docs/gang-scheduling.md shows render, are valid, and the
CompositeController they produce turns gang scheduling on in the hooks exactly as documented."""
from __future__ import annotations

import os

import pytest
import yaml
from helpers import yamlio
from helpers.gang_manifests import ROOT, readme_kustomizations, write_kustomization
from helpers.manifests import render, the, validation_errors

from hooks.shared.gang import COSCHEDULING_API, KUBERNETES_API, VOLCANO_API, Gang, read_gang

COMPONENTS = {"volcano": (VOLCANO_API, "volcano"),
              "scheduler-plugins": (COSCHEDULING_API, "scheduler-plugins-scheduler"),
              "kubernetes-gang": (KUBERNETES_API, "default-scheduler")}






# The other components (not gang scheduling), each documented where its test says.
OTHER_COMPONENTS = {"network-policy"}


def test_readme_shows_one_kustomization_per_component():
    assert sorted(readme_kustomizations()) == sorted(COMPONENTS)
    assert sorted(p.name for p in (ROOT / "metacontroller" / "components").iterdir()) == sorted({*COMPONENTS, *OTHER_COMPONENTS})


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_readme_kustomization_renders_valid_objects(tmp_path, component):
    objects = render(write_kustomization(tmp_path / "install", readme_kustomizations()[component]))
    problems = {f"{o['kind']}/{o['metadata']['name']}": validation_errors(o) for o in objects}
    assert {k: v for k, v in problems.items() if v} == {}
    base = render(ROOT / "metacontroller")
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - {
        (o["kind"], o["metadata"]["name"]) for o in base}
    assert added == {("ClusterRole", f"mxjob-metacontroller-podgroups-{component}"),
                     ("ClusterRoleBinding", f"mxjob-metacontroller-podgroups-{component}")}


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_rendered_controller_turns_the_gang_on_in_the_hooks(tmp_path, component):
    objects = render(write_kustomization(tmp_path / "install", readme_kustomizations()[component]))
    controller = the(objects, "CompositeController", "mxjob-controller")
    api_version, scheduler = COMPONENTS[component]
    assert read_gang({"controller": controller}) == Gang(api_version, scheduler)
    rule = controller["spec"]["childResources"][-1]
    assert rule == {"apiVersion": api_version, "resource": "podgroups",
                    "updateStrategy": {"method": "InPlace"}}
    # The rest of the controller is the plain install's.
    plain = the(render(ROOT / "metacontroller"), "CompositeController", "mxjob-controller")
    assert controller["spec"]["childResources"][:-1] == plain["spec"]["childResources"]
    # Every job kind's controller of the install (MXJob, ChainerJob) is turned on alike.
    controllers = [o for o in objects if o["kind"] == "CompositeController"]
    assert len(controllers) == len([o for o in render(ROOT / "metacontroller") if o["kind"] == "CompositeController"])
    assert all(read_gang({"controller": c}) == Gang(api_version, scheduler) for c in controllers)


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_metacontroller_may_manage_podgroups(tmp_path, component):
    objects = render(write_kustomization(tmp_path / "install", readme_kustomizations()[component]))
    name = f"mxjob-metacontroller-podgroups-{component}"
    [rule] = the(objects, "ClusterRole", name)["rules"]
    assert rule["apiGroups"] == [COMPONENTS[component][0].split("/")[0]]
    assert rule["resources"] == ["podgroups"]
    assert {"get", "list", "watch", "create", "update", "delete"} <= set(rule["verbs"])
    binding = the(objects, "ClusterRoleBinding", name)
    assert binding["roleRef"]["name"] == name
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "metacontroller",
                                    "namespace": "metacontroller"}]


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_every_composite_controller_is_patched(tmp_path, component):
    """Patches go by kind, so a second job kind's controller gets the rule and annotation too."""
    base = yamlio.load((ROOT / "metacontroller" / "compositecontroller.yaml").read_text())
    other = {**base, "metadata": {"name": "other-controller"},
             "spec": {**base["spec"], "parentResource": {"apiVersion": "example.org/v1",
                                                         "resource": "others"}}}
    directory = tmp_path / "two"
    directory.mkdir()
    (directory / "controllers.yaml").write_text(yaml.safe_dump_all([base, other]))
    components = os.path.relpath(ROOT / "metacontroller" / "components" / component, directory)
    (directory / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["controllers.yaml"], "components": [components]}))
    controllers = [o for o in render(directory) if o["kind"] == "CompositeController"]
    assert sorted(c["metadata"]["name"] for c in controllers) == ["mxjob-controller", "other-controller"]
    for controller in controllers:
        assert read_gang({"controller": controller}) == Gang(*COMPONENTS[component])
