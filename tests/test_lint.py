"""The tooling runs itself: ruff (lint and format) and mypy --strict pass on the tree, so
`make test` (what CI runs) fails on a style or typing regression, not only on behaviour."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "command",
    [
        ["ruff", "check", "service", "tests"],
        ["ruff", "format", "--check", "service", "tests"],
        ["mypy"],
    ],
    ids=["ruff-check", "ruff-format", "mypy-strict"],
)
@pytest.mark.timeout(300)
def test_tool_passes(command: list[str]) -> None:
    done = subprocess.run(
        [str(BIN / command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_mypy_checks_the_service_and_the_tests() -> None:
    """`mypy` with no arguments (above, and `make lint`) checks what pyproject.toml lists."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["strict"] is True
    assert {"service", "tests"} <= set(config["packages"])
