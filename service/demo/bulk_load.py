"""Writing a bulk plan (service/demo/bulk.py) into PostgreSQL, executions through COPY.

Accounts, workspaces and instances go through the snapshot loader's own steps (few rows;
passwords are hashed there); sync jobs, workflows and executions are copied straight into
their tables, large execution sets by several processes at once with the executions
table's keys and indexes dropped for the copy. Then the workflow summaries, the statistics
rollups (`rebuild_rollups`) and the planner statistics (service/store/planner_statistics.py)
are brought up to date. Not a path for a database that serves (docs/operations.md, "Loading
snapshots while serving"): `elova-mcp load` is. Why: docs/decisions/scale.md, "Bulk data".
"""

from __future__ import annotations

import asyncio
import multiprocessing
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO
from uuid import UUID

import asyncpg
import msgspec

from service.demo.bulk import (
    EXECUTION_COLUMNS,
    WORKFLOW_COLUMNS,
    BulkPlan,
    World,
    build_world,
    chunk_count,
    execution_rows,
    workflow_row,
)
from service.errors import BulkRefused
from service.store.db import connect
from service.store.load_executions import refresh_workflow_summaries
from service.store.load_inventory import load_accounts, load_instances, load_workspaces
from service.store.planner_statistics import analyze, qualified
from service.store.rollups import rebuild_rollups

# Below this many executions one process copies into the indexed table: rebuilding every
# index costs more than it saves.
PARALLEL_THRESHOLD = 100_000
# Every table the plan writes, analysed at the end (the writes span several transactions
# and processes: the snapshot loader's way of asking the transaction does not apply).
_WRITTEN = (
    "accounts", "workspaces", "memberships", "instances", "sync_jobs", "workflows",
    "executions", "workflow_execution_summaries", "execution_rollups", "execution_rollups_daily",
)  # fmt: skip
_SYNC_JOB_COLUMNS = (
    "id", "instance_id", "scope", "trigger", "status", "created_at", "finished_at", "error_code",
)  # fmt: skip


@dataclass(frozen=True)
class BulkReport:
    account_email: str
    account_password: str
    workspace_ids: list[str]
    instances: int
    workflows: int
    executions: int
    seconds: float


def _raws(records: Sequence[Any]) -> list[msgspec.Raw]:
    return [msgspec.Raw(msgspec.json.encode(r)) for r in records]


async def write_plan(
    dsn: str, plan: BulkPlan, *, jobs: int = 2, replace: bool = False, log: TextIO = sys.stderr
) -> BulkReport:
    """Write every record of the plan; BulkRefused when they exist and `replace` is false."""
    started = time.monotonic()
    world = build_world(plan)
    conn = await connect(dsn)
    try:
        await _prepare(conn, world, replace)
        async with conn.transaction():
            await _inventory(conn, world)
        _say(log, started, f"inventory written ({len(world.workflows)} workflows)")
        if plan.executions >= PARALLEL_THRESHOLD and jobs > 1:
            await _copy_parallel(conn, dsn, plan, jobs, log, started)
        else:
            await conn.copy_records_to_table(
                "executions",
                records=(row for c in range(chunk_count(plan)) for row in execution_rows(world, c)),
                columns=EXECUTION_COLUMNS,
            )
        _say(log, started, f"{plan.executions} executions written")
        async with conn.transaction():
            await refresh_workflow_summaries(conn, [UUID(w["id"]) for w in world.workflows])
            await rebuild_rollups(conn, [UUID(w["id"]) for w in world.workspaces])
        analyzed = await analyze(conn, await qualified(conn, _WRITTEN))
        _say(
            log,
            started,
            "workflow summaries and statistics rollups computed; ANALYZE of"
            f" {len(analyzed.tables)} tables took {analyzed.seconds:.2f} s",
        )
    finally:
        await conn.close()
    return BulkReport(
        account_email=plan.account_email,
        account_password=plan.account_password,
        workspace_ids=[w["id"] for w in world.workspaces],
        instances=len(world.instances),
        workflows=len(world.workflows),
        executions=plan.executions,
        seconds=time.monotonic() - started,
    )


def _say(log: TextIO, started: float, message: str) -> None:
    log.write(f"[{time.monotonic() - started:7.1f}s] {message}\n")
    log.flush()


async def _prepare(conn: asyncpg.Connection, world: World, replace: bool) -> None:
    if await conn.fetchval("SELECT to_regclass('executions')") is None:
        raise BulkRefused("the database has no schema yet; run `elova-mcp migrate`")
    ids = [UUID(w["id"]) for w in world.workspaces]
    found = await conn.fetchval("SELECT count(*) FROM workspaces WHERE id = ANY($1)", ids)
    if found and not replace:
        raise BulkRefused(
            f"this seed's workspaces already exist ({found}); pass --replace to write them anew"
        )
    if found:
        await conn.execute("DELETE FROM workspaces WHERE id = ANY($1)", ids)  # cascades
    account = UUID(world.account["id"])
    await conn.execute("DELETE FROM accounts WHERE id = $1", account)


async def _inventory(conn: asyncpg.Connection, world: World) -> None:
    accounts = await load_accounts(conn, _raws([world.account]))
    workspaces, _ = await load_workspaces(conn, _raws(world.workspaces), accounts)
    owners = await load_instances(conn, _raws(world.instances), workspaces)
    await conn.copy_records_to_table(
        "sync_jobs",
        records=[
            (
                j["id"],
                j["instanceId"],
                j["scope"],
                j["trigger"],
                j["status"],
                datetime.fromisoformat(j["createdAt"]),
                datetime.fromisoformat(j["finishedAt"]),
                j["errorCode"],
            )  # fmt: skip
            for j in world.sync_jobs
        ],
        columns=_SYNC_JOB_COLUMNS,
    )
    await conn.copy_records_to_table(
        "workflows",
        records=[workflow_row(w, str(owners[UUID(w["instanceId"])])) for w in world.workflows],
        columns=WORKFLOW_COLUMNS,
    )


# --- parallel copy with the executions' keys and indexes rebuilt afterwards ----------------

_CONSTRAINTS = """
SELECT conname, contype, pg_get_constraintdef(oid) AS definition FROM pg_constraint
 WHERE conrelid = 'executions'::regclass AND contype IN ('p', 'f', 'u') ORDER BY contype DESC
"""
_INDEXES = """
SELECT i.indexname, i.indexdef FROM pg_indexes i
 WHERE i.schemaname = current_schema() AND i.tablename = 'executions'
   AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = to_regclass(i.indexname))
"""


async def _copy_parallel(
    conn: asyncpg.Connection, dsn: str, plan: BulkPlan, jobs: int, log: TextIO, started: float
) -> None:
    # Keys and indexes dropped for the copy and rebuilt afterwards: one sort an index
    # instead of millions of random B-tree inserts.
    constraints = await conn.fetch(_CONSTRAINTS)
    indexes = await conn.fetch(_INDEXES)
    async with conn.transaction():
        for c in constraints:
            await conn.execute(f'ALTER TABLE executions DROP CONSTRAINT "{c["conname"]}"')
        for i in indexes:
            await conn.execute(f'DROP INDEX "{i["indexname"]}"')
    try:
        _say(log, started, f"copying executions with {jobs} processes (indexes dropped)")
        loop = asyncio.get_running_loop()
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=context) as pool:
            chunks = list(range(chunk_count(plan)))
            parts = [chunks[j::jobs] for j in range(jobs)]
            await asyncio.gather(
                *(loop.run_in_executor(pool, _copy_part, dsn, plan, part) for part in parts)
            )
        _say(log, started, "executions copied; rebuilding keys and indexes")
    finally:
        # In one transaction, its settings SET LOCAL: nothing is left on a pooler's session.
        async with conn.transaction():
            await conn.execute("SET LOCAL maintenance_work_mem = '512MB'")
            # Keys first (primary before foreign), then the other indexes, as they were.
            for c in sorted(constraints, key=lambda c: c["contype"] != "p"):
                await conn.execute(
                    f'ALTER TABLE executions ADD CONSTRAINT "{c["conname"]}" {c["definition"]}'
                )
            for i in indexes:
                await conn.execute(i["indexdef"])


def _copy_part(dsn: str, plan: BulkPlan, chunks: list[int]) -> int:
    """One process: generate these chunks and copy them on a connection of its own."""
    return asyncio.run(_copy_chunks(dsn, plan, chunks))


async def _copy_chunks(dsn: str, plan: BulkPlan, chunks: list[int]) -> int:
    world = build_world(plan)
    conn = await connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            await conn.copy_records_to_table(
                "executions",
                records=(row for c in chunks for row in execution_rows(world, c)),
                columns=EXECUTION_COLUMNS,
            )
    finally:
        await conn.close()
    return len(chunks)
