"""docs/deploying.md matches the manifests: the namespace, the Secrets and their keys, the
overlay and files it names, the image and its version, and the public host. A reader who
copies its commands meets the names the pods read."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.ops.yamldocs import load_all

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "deploying.md").read_text()
K8S = ROOT / "k8s"


def _yaml(path: Path) -> list[dict[str, Any]]:
    return list(load_all(path.read_text()))


def test_the_readme_links_the_guide() -> None:
    top = (ROOT / "README.md").read_text().split("\n## ", 3)
    assert "docs/deploying.md" in "\n## ".join(top[:3])


def test_every_repository_path_it_names_exists() -> None:
    paths = set(re.findall(r"\b((?:k8s|deploy|docs|grafana)/[\w./-]+\w)", GUIDE))
    paths.discard("deploy/elova-mcp")  # kubectl's name of the Deployment, not a file
    assert paths
    assert not [p for p in sorted(paths) if not (ROOT / p).exists()]


def test_namespace_and_overlay_are_the_manifests() -> None:
    overlay = _yaml(K8S / "overlays" / "production" / "kustomization.yaml")[0]
    namespace = overlay["namespace"]
    assert f"kubectl create namespace {namespace}" in GUIDE
    assert "kubectl apply -k k8s/overlays/production" in GUIDE
    assert set(re.findall(r"kubectl -n (\S+)", GUIDE)) == {namespace}


def test_secrets_and_keys_are_the_ones_the_pods_read() -> None:
    deployment = _yaml(K8S / "base" / "deployment.yaml")[0]
    pod = deployment["spec"]["template"]["spec"]
    read: dict[str, set[str]] = {}
    for container in pod["containers"] + pod["initContainers"]:
        for env in container.get("env", []):
            ref = env.get("valueFrom", {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                read.setdefault(ref["name"], set()).add(ref["key"])
    for volume in pod["volumes"]:
        if "secret" in volume:
            secret = volume["secret"]
            read.setdefault(secret["secretName"], set()).update(i["key"] for i in secret["items"])
    created: dict[str, set[str]] = {}
    for name, flags in re.findall(
        r"create secret generic (\S+)((?:\s*\\?\n?\s*--from-\S+)+)", GUIDE
    ):
        created[name] = {k for pair in re.findall(
            r"--from-(?:literal=([\w-]+)=|file=([\w.-]+))", flags) for k in pair if k}  # fmt: skip
    assert created == read


def test_image_version_and_host_match() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    base = _yaml(K8S / "base" / "kustomization.yaml")[0]
    image = base["images"][0]
    assert f"{image['newName']}:{version}" in GUIDE
    assert image["newTag"] == version
    ingress = _yaml(K8S / "overlays" / "production" / "ingress.yaml")[0]
    host = ingress["spec"]["rules"][0]["host"]
    assert f"https://{host}/readyz" in GUIDE


def test_network_policy_patches_it_shows_name_the_rules_they_mean() -> None:
    """The guide's patches of the NetworkPolicy (the ingress controller's peers, the
    monitoring namespace) address fields of the base policy, by the ports they open."""
    policy = next(
        d
        for d in _yaml(K8S / "base" / "networkpolicy.yaml")
        if d["metadata"]["name"] == "elova-mcp"
    )
    ingress = policy["spec"]["ingress"]
    paths = re.findall(r"path: (/spec/ingress/\S+)", GUIDE)
    assert "/spec/ingress/0/from" in paths
    for path in paths:
        index = int(path.split("/")[3])
        assert "from" in ingress[index], path
    ports = {int(p.split("/")[3]): ingress[int(p.split("/")[3])]["ports"][0]["port"] for p in paths}
    assert ports == {0: 8080, 1: 9090}
