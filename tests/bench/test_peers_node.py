"""The TypeScript peer shapes rows byte for byte as our tool does (tests/bench/peers/
typescript/shaping.ts, run by the Node 22 that `make tools` installs; no npm packages)."""

from __future__ import annotations

import os
import subprocess
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec
import pytest

from tests.bench import peers
from tests.bench.test_peers import ROWS, ours


def _as_pg_returns(row: dict[str, Any]) -> dict[str, Any]:
    """uuid and numeric as text (int8 parsed to numbers by the server's type parser)."""
    return {k: str(v) if isinstance(v, UUID | Decimal) else v for k, v in row.items()}


def test_the_typescript_peer_shapes_rows_as_ours() -> None:
    node = peers.node()
    if not node.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{node} missing under CI: `make tools` installs Node 22")
        pytest.skip("Node 22 not installed (make tools)")
    module = msgspec.json.encode(str(peers.TYPESCRIPT / "shaping.ts")).decode()
    script = (
        f"import {{ shape }} from {module};"
        "let input = '';"
        "for await (const chunk of process.stdin) input += chunk;"
        "process.stdout.write(JSON.stringify(JSON.parse(input).map(shape)));"
    )
    done = subprocess.run(
        [str(node), "--no-warnings", "--input-type=module", "-e", script],
        input=msgspec.json.encode([_as_pg_returns(row) for row in ROWS]),
        capture_output=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == ours()
