"""What the execution-tool tests share: a real ToolContext, schema validation, loading.

Handlers are called directly with a ToolContext over the real pool; every output is encoded
exactly as the transport does (msgspec) and validated against the tool's outputSchema.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
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
from service.tools.cursors import CursorCodec
from service.tools.executions import TOOLS as EXECUTION_TOOLS
from service.tools.stats import TOOLS as STATS_TOOLS
from tests.support.snapshots import Snapshot

CATALOG = Path(__file__).resolve().parents[2] / "service" / "contract" / "elova-tools.json"
TOOLS: dict[str, Tool[Any]] = {t.name: t for t in (*EXECUTION_TOOLS, *STATS_TOOLS)}
RESPONSE_BYTES = 256 * 1024


@cache
def validator(tool: str) -> Draft202012Validator:
    catalog = json.loads(CATALOG.read_text("utf-8"))
    schema = next(t["outputSchema"] for t in catalog["tools"] if t["name"] == tool)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@dataclass
class Client:
    """One connection (caller) calling the tools directly; `now` is the call's instant."""

    pool: asyncpg.Pool
    workspaces: dict[UUID, str]
    now: datetime
    codec: CursorCodec = field(default_factory=lambda: CursorCodec(os.urandom(32)))
    max_response_bytes: int = RESPONSE_BYTES
    caller: Caller | None = None

    def __post_init__(self) -> None:
        if self.caller is None:
            self.caller = Caller.build(
                account_id=uuid4(),
                approval_id=uuid4(),
                generation=1,
                client_id="tests",
                scopes=frozenset(ALL_SCOPES),
                eligible=self.workspaces,
            )

    def context(self) -> ToolContext:
        assert self.caller is not None
        return ToolContext(
            pool=self.pool,
            authorization=Authorization(self.caller),
            cursors=self.codec,
            now=self.now,
            max_response_bytes=self.max_response_bytes,
            response_overhead=200,
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
        output["_bytes"] = len(encoded)
        return output


async def load(pool: asyncpg.Pool, snap: Snapshot) -> None:
    async with pool.acquire() as conn:
        await load_snapshot(conn, snap.document())


def workspace_client(
    pool: asyncpg.Pool, ws: dict[str, Any], now: datetime, **kwargs: Any
) -> Client:
    return Client(pool, {UUID(ws["id"]): "owner"}, now, **kwargs)
