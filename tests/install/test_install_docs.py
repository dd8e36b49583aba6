"""The README's install and uninstall kustomizations, as a user copies them: the install overlay names the
user's image without editing the checkout, and the keep-jobs overlay deletes everything but the CRDs."""
from __future__ import annotations

import os
import re
from pathlib import Path

from helpers import yamlio
from helpers.manifests import render

import hooks

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CHECKOUT = "../mxjob-operator/"  # how the README's kustomizations refer to this repository
REGISTRY = "registry.example.com/team"


def readme_kustomization(first_line: str) -> str:
    """The README's YAML block whose first line (a comment) starts with `first_line`."""
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", README, re.S) if b.startswith(first_line)]
    assert len(blocks) == 1, f"README: expected one kustomization starting {first_line!r}, found {len(blocks)}"
    return blocks[0]


def write(directory: Path, text: str) -> Path:
    """The kustomization as the user saves it next to a checkout (here: the repository itself)."""
    directory.mkdir(parents=True)
    checkout = os.path.relpath(ROOT, directory) + "/"
    (directory / "kustomization.yaml").write_text(text.replace(CHECKOUT, checkout).replace("<registry>", REGISTRY))
    return directory


def identities(objects) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def test_install_overlay_names_the_users_image_and_installs_everything(tmp_path):
    installed = render(write(tmp_path / "my-install", readme_kustomization("# my-install/kustomization.yaml")))
    base = render(ROOT / "metacontroller")
    assert identities(installed) == identities(base)
    images = {c["image"] for o in installed if o["kind"] == "Deployment"
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert images == {f"{REGISTRY}/mxjob-hooks:{hooks.__version__}"}


def test_keep_jobs_overlay_deletes_everything_but_the_crds(tmp_path):
    write(tmp_path / "my-install", readme_kustomization("# my-install/kustomization.yaml"))
    kept = render(write(tmp_path / "keep-jobs", readme_kustomization("# keep-jobs/kustomization.yaml")))
    installed = identities(render(ROOT / "metacontroller"))
    crds = {("CustomResourceDefinition", "mxjobs.kubeflow.org"), ("CustomResourceDefinition", "chainerjobs.kubeflow.org")}
    assert crds <= installed
    assert identities(kept) == installed - crds


def test_readme_names_the_keep_jobs_directory_it_deletes():
    assert "kubectl delete -k keep-jobs/" in README
    assert "kubectl apply -k my-install/" in README
    # The warning the uninstall section exists for.
    assert re.search(r"deleting a CRD deletes every MXJob or ChainerJob", README)


def test_no_install_step_needs_a_standalone_kustomize():
    commands = "\n".join(re.findall(r"```sh\n(.*?)```", README, re.S))
    assert not re.search(r"(^|[;&|]\s*)kustomize\s", commands, re.M), "use kubectl kustomize / kubectl apply -k"
    assert yamlio.load(readme_kustomization("# my-install/kustomization.yaml"))["images"][0]["name"] == "mxjob-hooks"
