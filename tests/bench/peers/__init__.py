"""The servers users pick instead of ours, as peers in the same-answer comparison
(tests/bench/ceiling_bench.py): a TypeScript SDK server (typescript/server.ts, Node 22, `pg`)
and a FastMCP 2.x server (fastmcp/server.py, its own venv, asyncpg). Both are installed by
tests/bench/peers/install.sh (`make bench` runs it) with the versions their lockfiles pin.

Each answers the SDK reference's request (`scenarios.sdk_call`: stateless, 2025-11-25,
first page of a workspace) by running the page statement our tool embeds — its text made
here by `page_query`, handed over in PEER_PAGE_STATEMENT — and answering
{workspaceId, executions} with the rows shaped as ours. `check` compares a peer's rows with
ours before the peer is timed.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from service.store.reads.executions import page_query
from tests.bench import scenarios

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TYPESCRIPT = HERE / "typescript"
FASTMCP = HERE / "fastmcp"
NODE = ROOT / ".tools" / "node22" / "node_modules"
FASTMCP_PYTHON = ROOT / ".tools" / "bench-fastmcp" / "bin" / "python"
INSTALL = "bash tests/bench/peers/install.sh"
STATEMENT_VARIABLE = "PEER_PAGE_STATEMENT"


def node() -> Path:
    arch = {"x86_64": "x64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
    return NODE / f"node-linux-{arch}" / "bin" / "node"


@dataclass(frozen=True)
class Peer:
    label: str
    short: str
    target: float  # ours ÷ this peer, req/s (issue 23)
    installed: Path  # the file whose presence says the peer is installed
    program: tuple[Path, Path]  # the interpreter and the server's source

    def command(self, port: int, dsn: str) -> list[str]:
        return [*map(str, self.program), "--port", str(port), "--dsn", dsn]


def _version(package_json: Path, name: str) -> str:
    data = msgspec.json.decode(package_json.read_bytes())
    return str(data["dependencies"][name])


def _pinned(name: str) -> str:
    for line in (FASTMCP / "requirements.txt").read_text().splitlines():
        if line.startswith(f"{name}=="):
            return line.split("==", 1)[1].split()[0]
    return "?"


TS_SDK = _version(TYPESCRIPT / "package.json", "@modelcontextprotocol/sdk")
PG = _version(TYPESCRIPT / "package.json", "pg")
FASTMCP_VERSION = _pinned("fastmcp")
UVICORN = _pinned("uvicorn")

PEERS = (
    Peer(
        f"TypeScript SDK {TS_SDK} (stateless JSON, Express, pg {PG}, Node 22)",
        "TypeScript SDK",
        2.0,
        TYPESCRIPT / "node_modules" / ".elova-installed",
        (node(), TYPESCRIPT / "server.ts"),
    ),
    Peer(
        f"FastMCP {FASTMCP_VERSION} (stateless JSON, uvicorn {UVICORN}, uvloop + httptools)",
        "FastMCP",
        3.0,
        ROOT / ".tools" / "bench-fastmcp" / ".elova-installed",
        (FASTMCP_PYTHON, FASTMCP / "server.py"),
    ),
)


def statement() -> str:
    """The page statement our tool embeds, for a first page of `scenarios.PAGE` rows."""
    text, _ = page_query({}, scenarios.PAGE + 1)
    return text


def missing() -> list[Peer]:
    """The peers not installed here (the bench leaves them out and says so)."""
    return [p for p in PEERS if not p.installed.exists() or not p.program[0].exists()]


def _rows(body: bytes) -> list[dict[str, Any]]:
    answer = msgspec.json.decode(body)
    rows: list[dict[str, Any]] = answer["result"]["structuredContent"]["executions"]
    return rows


def check(name: str, ours: bytes, theirs: bytes) -> str:
    """What the comparison says of a peer's answer against ours; raises when the peer's
    execution ids are not ours in our order (a peer answering otherwise is not timed)."""
    here, there = _rows(ours), _rows(theirs)
    ids, their_ids = [r["id"] for r in here], [r["id"] for r in there]
    if ids != their_ids or not ids:
        raise RuntimeError(
            f"{name} answered other executions than ours: {their_ids[:3]}… against {ids[:3]}…"
        )
    if msgspec.json.encode(here) == msgspec.json.encode(there):
        return f"the same {len(ids)} rows, byte for byte"
    at = next(i for i, (a, b) in enumerate(zip(here, there, strict=True)) if a != b)
    return f"the same {len(ids)} execution ids in order, but row {at} differs"
