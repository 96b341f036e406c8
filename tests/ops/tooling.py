"""Where the offline validators live, and what a test does when one is missing.

Debian packages (promtool, docker-compose) come from `.ci/debian-packages.txt`; the rest
(kubernetes-validate, hadolint, kubectl, matplotlib, PyYAML) from `tests/ops/install.sh`
into `.tools/ops-venv`. A missing tool skips locally and fails in CI, which must have them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS_BIN = ROOT / ".tools" / "ops-venv" / "bin"


def require(name: str) -> str:
    """The path of a validator, or skip (fail in CI) when it is not installed."""
    found = _in_tools(name) or shutil.which(name)  # the pinned copy under .tools first
    if found:
        return found
    message = f"{name} is not installed: run `make tools` (tests/ops/install.sh)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _in_tools(name: str) -> str | None:
    candidate = TOOLS_BIN / name
    return str(candidate) if candidate.exists() else None


def run(args: list[str], *, input: str | None = None, timeout: float = 60) -> str:
    """Run a validator; a non-zero exit fails the test with everything it printed."""
    done = subprocess.run(
        args, input=input, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr
