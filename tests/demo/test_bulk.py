"""The bulk generator (`elova-mcp demo-data`): deterministic, what it writes through COPY is
exactly what the snapshot loader writes for the same records, and every tool answers it.

Small plans only (a few thousand executions); the parallel path (indexes dropped, several
processes copying) is exercised with a tiny chunk size.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

import asyncpg
import msgspec
import pytest
from aiohttp import web

from service.app import create_app
from service.app_keys import DB_POOL, TOKENS
from service.cli.approve import approve
from service.config import Config
from service.demo import bulk_load
from service.demo.bulk import BulkPlan, build_world, chunk_count, execution_rows, snapshot
from service.demo.bulk_load import write_plan
from service.errors import BulkRefused
from service.store.load_snapshot import load_snapshot
from tests.demo.test_tools import ClientFactory, DemoClient
from tests.support.services import TestDatabase

NOW = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)


def _plan(seed: int, executions: int = 3000, **kw: Any) -> BulkPlan:
    return BulkPlan(
        workspaces=2, instances=4, workflows=30, executions=executions, seed=seed, now=NOW, **kw
    )


def test_same_seed_same_records_other_seed_other_records() -> None:
    first = snapshot(build_world(_plan(11, chunk=700)))
    again = snapshot(build_world(_plan(11, chunk=700)))
    other = snapshot(build_world(_plan(12, chunk=700)))
    assert msgspec.json.encode(first) == msgspec.json.encode(again)
    assert {e["id"] for e in first["executions"]}.isdisjoint(e["id"] for e in other["executions"])
    # A chunk is the same whichever process makes it, in whatever order.
    world = build_world(_plan(11, chunk=700))
    assert list(execution_rows(world, 3)) == list(execution_rows(build_world(world.plan), 3))


def test_records_are_realistic() -> None:
    plan = _plan(13, executions=20_000, chunk=5000)
    executions = snapshot(build_world(plan))["executions"]
    assert len(executions) == 20_000
    per_workflow: dict[str | None, int] = {}
    statuses: dict[str, int] = {}
    for row in executions:
        per_workflow[row["workflowId"]] = per_workflow.get(row["workflowId"], 0) + 1
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1
    volumes = sorted((v for k, v in per_workflow.items() if k is not None), reverse=True)
    assert volumes[0] > 20 * volumes[-1]  # a few run constantly, many rarely
    assert 0.8 < statuses["success"] / len(executions) < 0.97
    assert {"error", "crashed", "canceled", "unknown"} <= set(statuses)
    undated = [e for e in executions if e["startedAt"] is None and e["createdAt"] is None]
    future = [e for e in executions if e["startedAt"] and e["startedAt"] > NOW.isoformat()]
    assert undated and not future and per_workflow.get(None)  # nothing dated after `now`
    assert any(e.get("cost") for e in executions) and any(e.get("history") for e in executions)
    assert any("cost" in e and e["cost"] is None for e in executions)


_EXECUTIONS = "SELECT * FROM executions WHERE workspace_id = ANY($1) ORDER BY id"
_WORKFLOWS = "SELECT * FROM workflows WHERE workspace_id = ANY($1) ORDER BY id"
_SUMMARIES = """SELECT s.* FROM workflow_execution_summaries s
  JOIN workflows w ON w.id = s.workflow_id WHERE w.workspace_id = ANY($1) ORDER BY s.workflow_id"""
_INSTANCES = "SELECT * FROM instances WHERE workspace_id = ANY($1) ORDER BY id"
_JOBS = """SELECT j.* FROM sync_jobs j JOIN instances i ON i.id = j.instance_id
 WHERE i.workspace_id = ANY($1) ORDER BY j.id"""
_ROLLUP_TABLES = ("execution_rollups", "execution_rollups_daily")


async def _state(conn: asyncpg.Connection, workspaces: list[UUID]) -> dict[str, list[Any]]:
    state = {}
    queries = {"executions": _EXECUTIONS, "workflows": _WORKFLOWS, "summaries": _SUMMARIES,
               "instances": _INSTANCES, "jobs": _JOBS}  # fmt: skip
    for name, query in queries.items():
        state[name] = [dict(r) for r in await conn.fetch(query, workspaces)]
    for table in _ROLLUP_TABLES:
        if await conn.fetchval("SELECT to_regclass($1)", table) is not None:
            state[table] = [
                dict(r)
                for r in await conn.fetch(
                    f"SELECT * FROM {table} WHERE workspace_id = ANY($1)"
                    " ORDER BY workspace_id, slot, instance_id",
                    workspaces,
                )
            ]
    return state


async def _indexes(conn: asyncpg.Connection) -> list[tuple[str, str]]:
    rows = await conn.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'executions' ORDER BY 1"
    )
    keys = await conn.fetch(
        "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
        " WHERE conrelid = 'executions'::regclass ORDER BY 1"
    )
    return [tuple(r) for r in rows] + [tuple(k) for k in keys]


@pytest.mark.parametrize("parallel", [False, True], ids=["one-process", "parallel"])
async def test_bulk_rows_equal_what_the_loader_writes(
    test_database: TestDatabase, monkeypatch: pytest.MonkeyPatch, parallel: bool
) -> None:
    plan = _plan(21 + parallel, chunk=800)
    world = build_world(plan)
    workspaces = [UUID(w["id"]) for w in world.workspaces]
    conn = await asyncpg.connect(test_database.dsn)
    try:
        before = await _indexes(conn)
        if parallel:
            monkeypatch.setattr(bulk_load, "PARALLEL_THRESHOLD", 1)
        log = io.StringIO()
        report = await write_plan(test_database.dsn, plan, jobs=2, log=log)
        assert report.executions == plan.executions and chunk_count(plan) == 4
        assert ("2 processes" in log.getvalue()) is parallel
        assert await _indexes(conn) == before  # every key and index is back
        bulk = await _state(conn, workspaces)
        assert len(bulk["executions"]) == plan.executions
        assert any(w["nodes_truncated"] for w in bulk["workflows"])  # the 1000-node workflow
        assert any(e["history"] for e in bulk["executions"])
        assert bulk["summaries"]
        await conn.execute("DELETE FROM workspaces WHERE id = ANY($1)", workspaces)
        await conn.execute("DELETE FROM accounts WHERE id = $1", UUID(world.account["id"]))
        await load_snapshot(conn, msgspec.json.encode(snapshot(world)))
        loaded = await _state(conn, workspaces)
    finally:
        await conn.close()
    for name, rows in loaded.items():
        assert bulk[name] == rows, name


async def test_a_plan_written_twice_is_refused_unless_replaced(test_database: TestDatabase) -> None:
    plan = _plan(31, executions=500)
    await write_plan(test_database.dsn, plan, log=io.StringIO())
    with pytest.raises(BulkRefused, match="--replace"):
        await write_plan(test_database.dsn, plan, log=io.StringIO())
    report = await write_plan(test_database.dsn, plan, replace=True, log=io.StringIO())
    conn = await asyncpg.connect(test_database.dsn)
    try:
        count = await conn.fetchval(
            "SELECT count(*) FROM executions WHERE workspace_id = ANY($1)",
            [UUID(w) for w in report.workspace_ids],
        )
    finally:
        await conn.close()
    assert count == 500


def test_cli_writes_and_says_how_to_approve(test_database: TestDatabase) -> None:
    args = ["--workspaces", "1", "--instances", "1", "--workflows", "3", "--executions", "200",
            "--seed", "41", "--now", "2026-03-29T00:30:00Z",
            "--database-url", test_database.dsn]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "service", "demo-data", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "200 executions" in done.stdout
    assert "elova-mcp approve --account bulk-41@elova.dev --workspace " in done.stdout
    again = subprocess.run(
        [sys.executable, "-m", "service", "demo-data", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 1 and "--replace" in again.stderr and not again.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "service",
            "demo-data",
            "--workflows",
            "1",
            "--instances",
            "3",
            "--database-url",
            test_database.dsn,
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "instance" in bad.stderr


async def test_every_tool_answers_the_bulk_data(
    test_database: TestDatabase,
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
) -> None:
    plan = _plan(51, executions=4000, chunk=1000)
    report = await write_plan(test_database.dsn, plan, log=io.StringIO())
    cfg = make_config(LIMIT_APPROVAL_PER_MINUTE="1000000")
    app: web.Application = create_app(cfg)
    client = await aiohttp_client(app)
    issued = await approve(
        client.app[DB_POOL],
        cfg,
        account=plan.account_email,
        workspaces=report.workspace_ids,
        client_name="bulk tool walk",
        tokens=client.app[TOKENS],
    )
    tools = DemoClient(client, issued.access_token)
    listed = (await tools.call("get_many_workspaces"))["workspaces"]
    assert sorted(w["id"] for w in listed) == sorted(report.workspace_ids)
    zones = {w["id"]: w["timeZone"] for w in listed}
    seen = 0
    for ws in report.workspace_ids:
        await tools.call("get_workspace", workspaceId=ws)
        for inst in (await tools.call("get_many_instances", workspaceId=ws))["instances"]:
            await tools.call("get_many_sync_jobs", workspaceId=ws, instanceId=inst["id"])
        for period in ("today", "7d", "30d", "all"):
            stats = await tools.call(
                "get_execution_stats", workspaceId=ws, period=period, timeZone=zones[ws]
            )
        assert stats["totals"]["executions"] > 0
        rows = await tools.pages("get_many_executions", "executions", workspaceId=ws)
        seen += len(rows)
        await tools.call("get_many_executions", workspaceId=ws, status="failed", period="30d")
        for row in rows[:: max(len(rows) // 40, 1)]:
            await tools.call("get_execution", workspaceId=ws, executionId=row["id"])
        for wf in await tools.pages("get_many_workflows", "workflows", workspaceId=ws,
                                    lifecycle="all"):  # fmt: skip
            await tools.call("get_workflow", workspaceId=ws, workflowId=wf["id"])
            await tools.call("get_many_executions", workspaceId=ws, workflowId=wf["id"], limit=5)
    assert seen == plan.executions
