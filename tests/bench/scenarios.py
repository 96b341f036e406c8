"""What the benchmark sends: an approval and its tokens, the tool calls of each scenario,
and cursors for deep pages.

A deep page (page 5000 of 50 rows) is reached with a cursor for that position, issued by
the service's own cursor codec under the service's signing key, exactly as the service
would have issued it at the end of page 4999 — a walk of 5000 pages would take minutes and
measure nothing more. This mirrors the position layout of service/tools/executions.py
([asOf µs, window start µs or None, sort_at µs, id bytes]); a change there shows up here as
VALIDATION_ERROR answers, which the harness reports as errors.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg
import msgspec

from service.auth.caller import Caller
from service.auth.tokens import TokenService
from service.cli.approve import approve
from service.config import Config
from service.rules.periods import window_start
from service.tools.cursors import CursorCodec, derive_cursor_key
from tests.bench.loadgen import SESSION_ID, Request

MODERN = "2026-07-28"
SDK_VERSION = "2025-11-25"
SESSION_VERSION = "2025-11-25"  # the session revision the bench speaks (docs/protocol.md)
DEEP_PAGE = 5000
PAGE = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Access:
    """The bench account's approval for the bench workspace, and how to mint its tokens."""

    cfg: Config
    caller: Caller
    client_id: str
    workspace_id: UUID
    time_zone: str
    read_generation: int

    def token(self) -> str:
        """A fresh access token (they live 5 minutes: one a load run)."""
        token, _ = TokenService(self.cfg).issue_access_token(
            account_id=self.caller.account_id,
            client_id=self.client_id,
            scopes=self.caller.scopes,
            approval_id=self.caller.approval_id,
            generation=self.caller.generation,
        )
        return token


BENCH_CLIENT = "bench"
# Approvals this process handed out: a second grant (a flooder beside the good caller) gets
# an approval of its own.
_granted: set[UUID] = set()
_REUSABLE = """
SELECT a.id FROM approvals a
JOIN oauth_clients c ON c.client_id = a.client_id AND c.client_name = $2
WHERE a.account_id = (SELECT id FROM accounts WHERE email = $1)
  AND a.revoked_at IS NULL AND a.expires_at > now() + interval '1 day'
  AND a.id <> ALL($4::uuid[])
  AND (SELECT array_agg(w.workspace_id ORDER BY w.workspace_id) FROM approval_workspaces w
       WHERE w.approval_id = a.id) = $3::uuid[]
ORDER BY a.created_at DESC LIMIT 1
"""


async def grant(
    conn: asyncpg.Connection, cfg: Config, email: str, workspace: str, *, also: Sequence[str] = ()
) -> Access:
    """An approval of the bench account for `workspace` (and the workspaces `also` names),
    the caller queries `workspace`.

    An earlier run's approval for the same workspaces is reused when one is still active
    (tokens are signed by this run's key but name the approval, which holds no key), so
    runs do not pile up approvals: an account has at most 100 active ones, and a data set
    serves many runs. Reusing one never changes it (no generation bump), so runs that share
    it at the same moment do not disturb each other."""
    wanted = sorted({UUID(workspace), *(UUID(w) for w in also)})
    approval_id = await conn.fetchval(_REUSABLE, email, BENCH_CLIENT, wanted, list(_granted))
    if approval_id is None:
        issued = await approve(
            conn, cfg, account=email, workspaces=wanted, client_name=BENCH_CLIENT
        )
        approval_id = issued.approval_id
    _granted.add(approval_id)
    row = await conn.fetchrow(
        "SELECT a.account_id, a.client_id, a.generation, a.scopes FROM approvals a WHERE a.id = $1",
        approval_id,
    )
    roles = await conn.fetch(
        "SELECT workspace_id, role FROM memberships WHERE account_id = $1"
        " AND workspace_id = ANY($2::uuid[])",
        row["account_id"],
        wanted,
    )
    ws = await conn.fetchrow(
        "SELECT time_zone, read_generation FROM workspaces WHERE id = $1", UUID(workspace)
    )
    caller = Caller.build(
        account_id=row["account_id"],
        approval_id=approval_id,
        generation=row["generation"],
        client_id=row["client_id"],
        scopes=frozenset(row["scopes"]),
        eligible={r["workspace_id"]: r["role"] for r in roles},
    )
    return Access(
        cfg, caller, row["client_id"], UUID(workspace), ws["time_zone"], ws["read_generation"]
    )


def tool_call(token: str, name: str, arguments: dict[str, Any], request_id: int = 1) -> Request:
    """A stateless (2026-07-28) tools/call to our service, as the official client sends it."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    return Request("/mcp", headers, msgspec.json.encode(body).decode())


def _session_request(token: str, body: dict[str, Any], session: bool = True) -> Request:
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session:
        headers |= {"Mcp-Session-Id": SESSION_ID, "MCP-Protocol-Version": SESSION_VERSION}
    return Request("/mcp", headers, msgspec.json.encode(body).decode())


def session_opening(token: str) -> list[Request]:
    """What a 2025-11-25 client sends once a connection: `initialize`, then
    `notifications/initialized` in the session it opened (loadgen's `opening`)."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": SESSION_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "elova-bench", "version": "1"},
        },
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    return [
        _session_request(token, initialize, session=False),
        _session_request(token, initialized),
    ]


def session_tool_call(
    token: str, name: str, arguments: dict[str, Any], request_id: int = 1
) -> Request:
    """A tools/call in the connection's 2025-11-25 session (`Mcp-Session-Id` and
    `MCP-Protocol-Version` headers, no `_meta`), as the official client sends it."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }
    return _session_request(token, body)


def sdk_call(workspace_id: UUID, limit: int = PAGE) -> Request:
    """The same call to the SDK reference server (stateless, JSON responses)."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "get_many_executions",
            "arguments": {"workspaceId": str(workspace_id), "limit": limit},
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": SDK_VERSION,
    }
    return Request("/mcp", headers, msgspec.json.encode(body).decode())


def bare_call(workspace_id: UUID, limit: int = PAGE) -> Request:
    body = {"workspaceId": str(workspace_id), "limit": limit}
    return Request(
        "/executions", {"Content-Type": "application/json"}, msgspec.json.encode(body).decode()
    )


# --- deep pages ---------------------------------------------------------------------------

_CONDITIONS = {
    "instance": "instance_id = ${}",
    "workflow": "workflow_id = ${}",
    "status": "status = ANY(${}::text[])",
    "window": "dated AND sort_at >= ${} AND sort_at <= ${}",
}


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


async def deep_cursor(
    conn: asyncpg.Connection, access: Access, arguments: dict[str, Any], page: int = DEEP_PAGE
) -> tuple[str, int] | None:
    """A cursor whose next page is `page` (or the last full page when fewer exist) of
    get_many_executions with these arguments; None when there is no second page."""
    as_of = datetime.now(UTC)
    period = arguments.get("period", "all")
    zone_name = arguments.get("timeZone")
    start = window_start(period, as_of, ZoneInfo(zone_name or access.time_zone))
    conditions, values = ["workspace_id = $1"], [access.workspace_id]
    filters: dict[str, tuple[Any, ...]] = {}
    if "instanceId" in arguments:
        filters["instance"] = (UUID(arguments["instanceId"]),)
    if "workflowId" in arguments:
        filters["workflow"] = (UUID(arguments["workflowId"]),)
    if "status" in arguments:
        status = arguments["status"]
        filters["status"] = (["error", "crashed"] if status == "failed" else [status],)
    if start is not None:
        filters["window"] = (start, as_of)
    for name, args in filters.items():
        numbers = range(len(values) + 1, len(values) + 1 + len(args))
        conditions.append(_CONDITIONS[name].format(*numbers))
        values.extend(args)
    where = " AND ".join(conditions)
    total = await conn.fetchval(f"SELECT count(*) FROM executions WHERE {where}", *values)
    page = min(page, (total - 1) // PAGE + 1)
    if page < 2:
        return None
    row = await conn.fetchrow(
        f"SELECT sort_at, id FROM executions WHERE {where}"
        f" ORDER BY sort_at DESC, id DESC OFFSET {(page - 1) * PAGE - 1} LIMIT 1",
        *values,
    )
    codec = CursorCodec(derive_cursor_key(access.cfg.signing_key_pem))
    binding = codec.binding(
        "get_many_executions",
        access.caller,
        [
            str(access.workspace_id),
            arguments.get("instanceId"),
            arguments.get("workflowId"),
            arguments.get("status"),
            period,
            zone_name,
        ],
        PAGE,
    )
    position = [
        _micros(as_of),
        None if start is None else _micros(start),
        _micros(row["sort_at"]),
        row["id"].bytes,
    ]
    return codec.issue(binding, access.read_generation, position), page


async def sample_ids(conn: asyncpg.Connection, table: str, workspace: UUID, n: int) -> list[str]:
    """n ids spread over the table (a sample of pages, not only the hot newest rows)."""
    assert table in ("executions", "workflows")
    rows = await conn.fetch(
        f"SELECT id FROM {table} TABLESAMPLE SYSTEM (1) WHERE workspace_id = $1 LIMIT $2",
        workspace,
        n,
    )
    ids = [str(r["id"]) for r in rows]
    if len(ids) < n:  # small tables: take them all
        rows = await conn.fetch(f"SELECT id FROM {table} WHERE workspace_id = $1", workspace)
        ids = [str(r["id"]) for r in rows]
    random.Random(7).shuffle(ids)
    return ids[:n]
