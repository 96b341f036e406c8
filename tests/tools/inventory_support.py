"""What the inventory-tool tests share: a caller, a real ToolContext, schema validation.

Handlers are called directly over the real pool with arguments decoded as the transport
decodes them; every output is encoded as the transport does (msgspec) and validated against
the tool's outputSchema (Draft 2020-12 with format checking).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import msgspec
from jsonschema import Draft202012Validator

from service.auth.authorization import Authorization
from service.auth.caller import ALL_SCOPES, Caller
from service.store.load_snapshot import load_snapshot
from service.tools.base import Tool, ToolContext
from service.tools.cursors import CursorCodec, derive_cursor_key
from service.tools.instances import TOOLS as INSTANCE_TOOLS
from service.tools.sync_jobs import TOOLS as SYNC_JOB_TOOLS
from service.tools.workflows import TOOLS as WORKFLOW_TOOLS
from service.tools.workspaces import TOOLS as WORKSPACE_TOOLS
from tests.support.snapshots import Snapshot

CATALOG = Path(__file__).resolve().parents[2] / "service" / "contract" / "elova-tools.json"
TOOLS: dict[str, Tool[Any]] = {
    t.name: t for t in (*WORKSPACE_TOOLS, *INSTANCE_TOOLS, *SYNC_JOB_TOOLS, *WORKFLOW_TOOLS)
}
RESPONSE_BYTES = 256 * 1024
OVERHEAD = 200
NOW = datetime(2025, 1, 16, 12, 0, tzinfo=UTC)


@cache
def validator(tool: str) -> Draft202012Validator:
    catalog = json.loads(CATALOG.read_text("utf-8"))
    schema = next(t["outputSchema"] for t in catalog["tools"] if t["name"] == tool)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def codec_for(signing_key_pem: bytes) -> CursorCodec:
    return CursorCodec(derive_cursor_key(signing_key_pem))


@dataclass
class Client:
    """One approval (caller) calling the inventory tools directly."""

    pool: asyncpg.Pool
    workspaces: dict[UUID, str]
    codec: CursorCodec
    max_response_bytes: int = RESPONSE_BYTES
    account_id: UUID = field(default_factory=uuid4)
    approval_id: UUID = field(default_factory=uuid4)
    generation: int = 1

    @property
    def caller(self) -> Caller:
        return Caller.build(
            account_id=self.account_id,
            approval_id=self.approval_id,
            generation=self.generation,
            client_id="inventory-tests",
            scopes=frozenset(ALL_SCOPES),
            eligible=self.workspaces,
        )

    def context(self) -> ToolContext:
        return ToolContext(
            pool=self.pool,
            authorization=Authorization(self.caller),
            cursors=self.codec,
            now=NOW,
            max_response_bytes=self.max_response_bytes,
            response_overhead=OVERHEAD,
        )

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """Decode the arguments as the transport does, run the handler, validate the output."""
        spec = TOOLS[tool]
        params = spec.decode(msgspec.json.encode(arguments))
        result = await spec.handler(self.context(), params)
        encoded = msgspec.json.encode(result)
        output: dict[str, Any] = json.loads(encoded)
        errors = sorted(validator(tool).iter_errors(output), key=lambda e: list(e.path))
        assert not errors, [f"{list(e.path)}: {e.message[:300]}" for e in errors]
        assert self.context().fits(encoded), f"{len(encoded)} bytes exceed the response bound"
        return output

    async def walk(self, tool: str, **arguments: Any) -> tuple[list[dict[str, Any]], int]:
        """Follow nextCursor to the end; return every listed row and the number of pages."""
        key = {"get_many_workspaces": "workspaces", "get_many_workflows": "workflows"}[tool]
        rows: list[dict[str, Any]] = []
        pages = 0
        cursor = None
        while True:
            extra: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
            page = await self.call(tool, **arguments, **extra)
            pages += 1
            assert page[key] or pages == 1, "a cursor led to an empty page"
            rows.extend(page[key])
            cursor = page["nextCursor"]
            if cursor is None:
                return rows, pages


def client_for(
    pool: asyncpg.Pool, codec: CursorCodec, *workspaces: dict[str, Any], role: str = "owner"
) -> Client:
    return Client(pool, {UUID(ws["id"]): role for ws in workspaces}, codec)


async def load(pool: asyncpg.Pool, snap: Snapshot | bytes) -> None:
    document = snap if isinstance(snap, bytes) else snap.document()
    async with pool.acquire() as conn:
        await load_snapshot(conn, document)
