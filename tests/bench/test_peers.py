"""The bench's peers (tests/bench/peers/) as far as they can be checked without installing
them: their sources and lockfiles are there and pin exact versions (SDK 1.x, FastMCP 2.x),
their install step is `make bench`'s alone, and each shapes rows byte for byte as our tool
does (no PostgreSQL, no npm; the TypeScript peer's shaping runs under Node in
tests/bench/test_peers_node.py).
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any
from uuid import UUID

import msgspec
import pytest

from service.store.reads.executions import ROW_COLUMNS
from service.tools.executions import shape_row
from tests.bench import peers
from tests.bench.peers.fastmcp.shaping import shape as fastmcp_shape

pytestmark = pytest.mark.unit

EXACT = re.compile(r"^\d+\.\d+\.\d+$")


def _package() -> dict[str, Any]:
    data: dict[str, Any] = msgspec.json.decode((peers.TYPESCRIPT / "package.json").read_bytes())
    return data


def test_the_typescript_peer_pins_exact_versions_and_its_lockfile_holds_them() -> None:
    pins: dict[str, str] = _package()["dependencies"]
    assert set(pins) >= {"@modelcontextprotocol/sdk", "pg"}
    assert all(EXACT.match(v) for v in pins.values()), pins
    assert pins["@modelcontextprotocol/sdk"].startswith("1.")
    lock: dict[str, Any] = msgspec.json.decode(
        (peers.TYPESCRIPT / "package-lock.json").read_bytes()
    )
    assert lock["packages"][""]["dependencies"] == pins
    for name, version in pins.items():
        assert lock["packages"][f"node_modules/{name}"]["version"] == version


def test_the_fastmcp_peer_pins_every_package_and_fastmcp_2() -> None:
    lines = (peers.FASTMCP / "requirements.txt").read_text().splitlines()
    pinned = [line.split(" ;")[0] for line in lines if line and not line.startswith((" ", "#"))]
    assert pinned and all(re.match(r"^[A-Za-z0-9._-]+==[^=]+$", p) for p in pinned), pinned
    versions = dict(p.split("==", 1) for p in pinned)
    assert versions["fastmcp"].startswith("2.")
    assert versions["mcp"].startswith("1.")
    for name in ("asyncpg", "uvicorn", "uvloop", "httptools"):
        assert name in versions
    wanted = (peers.FASTMCP / "requirements.in").read_text().splitlines()
    for line in (w for w in wanted if w and not w.startswith("#")):
        name, version = line.split("==")
        assert versions[name] == version, (name, version, versions[name])


def test_the_peers_are_installed_by_make_bench_only() -> None:
    root = peers.ROOT
    install = peers.HERE / "install.sh"
    assert install.exists() and (peers.TYPESCRIPT / "server.ts").exists()
    assert (peers.FASTMCP / "server.py").exists()
    # `make tools` (hence `make test` and CI) runs every tests/*/install.sh: not this one.
    assert install.relative_to(root).parts != ("tests", install.parent.name, "install.sh")
    makefile = (root / "Makefile").read_text()
    bench = makefile[makefile.index("\nbench:") :].split("\n\n")[0]
    assert "tests/bench/peers/install.sh" in bench


def _row(number: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": UUID(int=number),
        "instance_id": UUID(int=1000 + number),
        "instance_name": "n8n prod",
        "workflow_id": UUID(int=2000 + number),
        "workflow_name": "Daily sales report",
        "source_id": str(number),
        "source_workflow_id": "76nwb7pB4gYF7SPC",
        "status": "success",
        "started_at": "2026-11-30T09:00:01.500Z",
        "created_at": "2026-11-30T09:00:01Z",
        "stopped_at": "2026-11-30T09:00:03.000250Z",
        "observed_at": "2026-11-30T09:01:00Z",
        "duration_ms": 1500,
        "source_missing": False,
        "cost_state": 0,
        "cost_amount": None,
        "cc_state": None,
        "cc_priced": None,
        "cc_unresolved": None,
        "cc_excluded": None,
        "cc_observations": None,
        "cc_missing_mapping": None,
    }
    row.update(values)
    return row


COVERAGE = {"cc_priced": 3, "cc_unresolved": 1, "cc_excluded": 0, "cc_observations": 4}
ROWS = [
    _row(1),
    _row(2, workflow_id=None, stopped_at=None, duration_ms=None, status="running"),
    _row(3, cost_state=1, cc_state="partial", **COVERAGE),
    _row(4, cost_state=2, cost_amount=Decimal("0.001500"), cc_state="complete", **COVERAGE,
         cc_missing_mapping=2),
    _row(5, cost_state=2, cost_amount=Decimal("0.000"), source_missing=True),
    _row(6, cost_state=2, cost_amount=Decimal("12"), workflow_name="é" * 150),
    _row(7, cost_state=2, cost_amount=Decimal("100.50"), workflow_name="🚀" * 100,
         instance_name="🚀" * 201, source_id="x" * 250),
    _row(8, workflow_name="🚀a" * 60, source_workflow_id="ß" * 200),
]  # fmt: skip


def ours() -> bytes:
    """Our shaping of ROWS, each given as our statements return it: ROW_COLUMNS in order."""
    return msgspec.json.encode(
        [shape_row(tuple(row.get(name) for name in ROW_COLUMNS)) for row in ROWS]
    )


def test_the_fastmcp_peer_shapes_rows_as_ours() -> None:
    assert msgspec.json.encode([fastmcp_shape(row) for row in ROWS]) == ours()
