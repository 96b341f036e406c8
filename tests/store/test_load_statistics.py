"""`elova-mcp load` leaves the planner statistics current for exactly the tables it wrote, in
the same run, a large load and an incremental one alike (nothing waits for autovacuum,
which is off on some machines and never reaches an incremental load under 10 % of a table).

Proved by PostgreSQL's own counters: pg_stat_user_tables.analyze_count (manual ANALYZE only,
autovacuum counts apart) moves for the written tables and no other, and pg_class.reltuples
equals the rows each table holds.
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import pytest

from service.demo.bulk import BulkPlan
from service.demo.bulk_load import write_plan
from service.store.load_snapshot import load_snapshot
from tests.store.test_load_cli import run_load, snapshot_file
from tests.support.services import TestDatabase
from tests.support.snapshots import Snapshot, member

RECORDS = (
    "accounts", "workspaces", "memberships", "instances", "sync_jobs", "workflows",
)  # fmt: skip
EXECUTIONS = (
    "executions", "execution_rollups", "execution_rollups_daily", "workflow_execution_summaries",
)  # fmt: skip


async def analyze_counts(pool: asyncpg.Pool) -> dict[str, int]:
    rows = await pool.fetch("SELECT relname, analyze_count FROM pg_stat_user_tables")
    return {r["relname"]: r["analyze_count"] for r in rows}


async def analysed_since(pool: asyncpg.Pool, before: dict[str, int]) -> set[str]:
    after = await analyze_counts(pool)
    return {name for name, count in after.items() if count > before.get(name, 0)}


async def assert_estimates_exact(pool: asyncpg.Pool, tables: tuple[str, ...]) -> None:
    """Each table's reltuples is its row count (small tables: ANALYZE reads every page)."""
    for table in tables:
        estimate = await pool.fetchval(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = $1::regclass", table
        )
        assert estimate == await pool.fetchval(f"SELECT count(*) FROM {table}"), table


def big_snapshot(executions: int) -> tuple[Snapshot, dict[str, object]]:
    snap = Snapshot()
    owner = snap.account()
    ws = snap.workspace(members=[member(owner)])
    inst = snap.instance(ws)
    snap.sync_job(inst)
    wf = snap.workflow(inst)
    for n in range(executions):
        snap.execution(inst, wf, startedAt=f"2025-01-{1 + n % 28:02d}T{n % 24:02d}:00:00Z")
    return snap, inst


@pytest.mark.timeout(60)
async def test_load_analyzes_exactly_the_tables_it_wrote(
    test_database: TestDatabase, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    snap, _ = big_snapshot(300)
    before = await analyze_counts(db_pool)
    done = run_load(test_database, snapshot_file(tmp_path, snap))
    assert done.returncode == 0, done.stderr
    assert "planner statistics updated: ANALYZE of 10 tables took" in done.stderr
    assert await analysed_since(db_pool, before) == set(RECORDS + EXECUTIONS)
    await assert_estimates_exact(db_pool, RECORDS + EXECUTIONS)


async def test_an_incremental_load_is_analysed_too(
    test_database: TestDatabase, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    snap, inst = big_snapshot(400)
    async with db_pool.acquire() as conn:
        await load_snapshot(conn, snap.document())
    # 20 new executions: 5 % of the instance's, far under autovacuum's 10 % threshold.
    more = Snapshot()
    for _ in range(20):
        more.execution(inst, startedAt="2025-02-01T10:00:00Z")
    before = await analyze_counts(db_pool)
    done = run_load(test_database, snapshot_file(tmp_path, more))
    assert done.returncode == 0, done.stderr
    # No execution of a workflow: its summaries are not written, so not analysed.
    written = {"executions", "execution_rollups", "execution_rollups_daily"}
    assert await analysed_since(db_pool, before) == written
    await assert_estimates_exact(db_pool, tuple(written))


async def test_an_inventory_load_analyzes_only_its_tables(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()  # no `members`: memberships are left as they are
    inst = snap.instance(ws)
    snap.workflow(inst)
    before = await analyze_counts(db_pool)
    async with db_pool.acquire() as conn:
        report = await load_snapshot(conn, snap.document())
    assert {t.rsplit(".", 1)[1] for t in report.analyzed.tables} == {
        "workspaces", "instances", "workflows",
    }  # fmt: skip
    assert report.analyzed.tables == report.written
    assert await analysed_since(db_pool, before) == {"workspaces", "instances", "workflows"}


async def test_a_refused_load_analyzes_nothing(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    snap.instance(ws, status="sideways")
    before = await analyze_counts(db_pool)
    async with db_pool.acquire() as conn:
        with pytest.raises(Exception, match="status"):
            await load_snapshot(conn, snap.document())
    assert await analysed_since(db_pool, before) == set()


async def test_demo_data_analyzes_every_table_it_writes(
    test_database: TestDatabase, db_pool: asyncpg.Pool
) -> None:
    plan = BulkPlan(
        workspaces=1, instances=2, workflows=6, executions=800, seed=2020,
        now=datetime(2026, 3, 1, tzinfo=UTC),
    )  # fmt: skip
    before = await analyze_counts(db_pool)
    log = io.StringIO()
    await write_plan(test_database.dsn, plan, replace=True, log=log)
    assert "ANALYZE of 10 tables took" in log.getvalue()
    assert await analysed_since(db_pool, before) == set(RECORDS + EXECUTIONS)
    await assert_estimates_exact(db_pool, RECORDS + EXECUTIONS)
