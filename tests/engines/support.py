"""What the engine tests share: a small world of retained records with an approved caller,
the nine tools' calls on it, and one call over HTTP as a client sends it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
from aiohttp.test_utils import TestClient

from service.auth.tokens import TokenService
from service.store.load_snapshot import load_snapshot
from tests.support.approvals import Member, granted
from tests.support.mcp_wire import tool_call
from tests.support.snapshots import Snapshot, member

NOW = datetime(2025, 1, 16, 12, 0, tzinfo=UTC)  # every app of these tests reads this clock


@dataclass
class World:
    workspace: str
    instance: str
    workflow: str
    executions: list[str]
    who: Member


async def seed_world(pool: asyncpg.Pool, executions: int = 12) -> World:
    snap = Snapshot()
    acc = snap.account()
    ws = snap.workspace(members=[member(acc)])
    inst = snap.instance(ws)
    snap.sync_job(inst)
    wf = snap.workflow(inst)
    snap.workflow(inst)
    ids = []
    for n in range(executions):
        status = ("success", "error", "running")[n % 3]
        started = f"2025-01-15T{n % 24:02d}:00:00Z"
        stopped = None if status == "running" else f"2025-01-15T{n % 24:02d}:00:05Z"
        ids.append(
            snap.execution(inst, wf, status=status, startedAt=started, createdAt=started,
                           stoppedAt=stopped)["id"]
        )  # fmt: skip
    async with pool.acquire() as conn:
        await load_snapshot(conn, snap.document())
    who = Member(uuid.UUID(acc["id"]), acc["email"], [uuid.UUID(ws["id"])], uuid.uuid4())
    return World(ws["id"], inst["id"], wf["id"], ids, who)


async def token_for(pool: asyncpg.Pool, tokens: TokenService, world: World) -> tuple[str, str]:
    """(access token, approval id) of a new approval of the world's account."""
    approval, issued = await granted(pool, tokens, world.who)
    return issued.access_token, str(approval.id)


def nine_calls(world: World) -> list[tuple[str, dict[str, Any]]]:
    ws = world.workspace
    return [
        ("get_many_workspaces", {}),
        ("get_workspace", {"workspaceId": ws}),
        ("get_many_instances", {"workspaceId": ws}),
        ("get_execution_stats", {"workspaceId": ws, "period": "7d", "timeZone": "UTC"}),
        ("get_many_sync_jobs", {"workspaceId": ws, "instanceId": world.instance}),
        ("get_many_executions", {"workspaceId": ws, "limit": 5}),
        (
            "get_many_executions",
            {"workspaceId": ws, "workflowId": world.workflow, "limit": 3, "status": "error"},
        ),  # fmt: skip
        ("get_execution", {"workspaceId": ws, "executionId": world.executions[0]}),
        ("get_many_workflows", {"workspaceId": ws}),
        ("get_workflow", {"workspaceId": ws, "workflowId": world.workflow}),
    ]


async def call(
    client: TestClient[Any, Any], token: str, tool: str, arguments: dict[str, Any], rid: int = 1
) -> tuple[int, Any]:
    """(HTTP status, the result's structuredContent — or the tool error's result, or the
    JSON-RPC error) of one tools/call."""
    body, headers = tool_call(tool, arguments, token=token, request_id=rid)
    resp = await client.post("/mcp", json=body, headers=headers)
    if resp.status != 200:
        return resp.status, await resp.text()
    answer = await resp.json()
    if "error" in answer:
        return resp.status, answer["error"]
    result = answer["result"]
    return resp.status, result.get("structuredContent", result)


# --- two processes behind one pooler ----------------------------------------------------

# Each process sends statements of its own shape; an answer of the other's shape (or of
# another value) is a statement mixed up between them.
_Shape = tuple[str, Callable[[int], tuple[Any, ...]], Callable[[int], dict[str, Any]]]
_SHAPES: dict[int, _Shape] = {
    0: ("SELECT $1::int AS n, 'zero' AS who", lambda n: (n,), lambda n: {"n": n, "who": "zero"}),
    1: (
        "SELECT 'one' AS who, $1::text AS t, $2::int * 2 AS twice",
        lambda n: (str(n), n),
        lambda n: {"who": "one", "t": str(n), "twice": 2 * n},
    ),
}


def hammer(dsn: str, shape: int, rounds: int, pooled: bool) -> tuple[int, int, list[str]]:
    """In a process of its own: `rounds` statements of `shape` on 4 connections at once,
    through the service's pool (`pooled`) or asyncpg's defaults (named statements);
    (right answers, wrong answers, the errors' types)."""
    import asyncio

    return asyncio.run(_hammer(dsn, shape, rounds, pooled))


async def _hammer(dsn: str, shape: int, rounds: int, pooled: bool) -> tuple[int, int, list[str]]:
    import asyncio

    from service.config import Config
    from service.store.db import create_pool

    if pooled:
        env = {"ELOVA_DATABASE_URL": dsn, "ELOVA_DATABASE_POOLER": "transaction",
               "ELOVA_DB_POOL_MIN": "4", "ELOVA_DB_POOL_MAX": "4"}  # fmt: skip
        pool = await create_pool(Config.from_env(env, need_key=False))
    else:
        made = await asyncpg.create_pool(dsn, min_size=4, max_size=4)
        assert made is not None
        pool = made
    sql, args, expected = _SHAPES[shape]
    right = wrong = 0
    errors: list[str] = []

    async def worker(start: int) -> None:
        nonlocal right, wrong
        for n in range(start, rounds, 4):
            try:
                row = await pool.fetchrow(sql, *args(n))
            except (asyncpg.PostgresError, asyncpg.InterfaceError) as err:
                errors.append(type(err).__name__)
                continue
            if row is not None and dict(row) == expected(n):
                right += 1
            else:
                wrong += 1

    try:
        async with asyncio.timeout(120):
            await asyncio.gather(*(worker(k) for k in range(4)))
    finally:
        await pool.close()
    return right, wrong, errors
