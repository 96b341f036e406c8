"""YAML for the ops tests, parsed by the tools interpreter (PyYAML lives in .tools/ops-venv,
not in the project's dependencies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.ops.tooling import TOOLS_BIN, require, run

_LOAD = (
    "import json, sys, yaml\n"
    "json.dump([d for d in yaml.safe_load_all(sys.stdin) if d is not None], sys.stdout)\n"
)


def load_all(text: str) -> list[Any]:
    """Every document of a YAML stream, as JSON-compatible values."""
    require("kubernetes-validate")  # the tools venv is there (skips, or fails in CI)
    return list(json.loads(run([str(TOOLS_BIN / "python"), "-c", _LOAD], input=text)))


def load_file(path: Path) -> Any:
    (doc,) = load_all(path.read_text())
    return doc
