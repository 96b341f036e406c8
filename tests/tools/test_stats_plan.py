"""The segment statement of get_execution_stats reads one index range a segment, whatever
other workspaces hold (issue 23): on a database of its own holding many workspaces' slot
rollups, EXPLAIN (ANALYZE) of every period reads the asked ranges' rows, each by
an index scan bounded by the segment's slots, with and without planner statistics (this
PostgreSQL runs with autovacuum off; nothing may rely on ANALYZE). The plan before it read
every slot of the workspace and removed all but the segments' rows with a join filter."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg
import pytest

from service.rules.periods import buckets_for
from service.store.reads import stats
from tests.support.services import TestDatabase, create_database, drop_database

WORKSPACES, DAYS = 40, 40
AS_OF = datetime(2024, 11, 20, 12, 7, tzinfo=UTC)
ZONE = "America/New_York"
ROLLUPS = ("execution_rollups", "execution_rollups_daily")

# Every workspace: one instance, a rollup row in each 15-minute slot and day of DAYS days.
_FILL = f"""
INSERT INTO workspaces (id, name, time_zone)
SELECT ('00000000-0000-0000-0000-' || lpad(w::text, 12, '0'))::uuid, 'w' || w, '{ZONE}'
  FROM generate_series(1, {WORKSPACES}) w;
INSERT INTO instances (id, workspace_id, name, status, auto_sync_enabled,
                       workflow_interval_minutes, history_complete, sync_pending)
SELECT id, id, name, 'connected', true, 5, true, false FROM workspaces;
INSERT INTO execution_rollups
SELECT w.id, w.id, s, 3, 2, 1, 1, 1, 0.5, 1, 0, 0, 1, 0, 0
  FROM workspaces w,
       generate_series(timestamptz '{AS_OF:%Y-%m-%d}' - interval '{DAYS} days',
                       timestamptz '{AS_OF:%Y-%m-%d}', interval '15 minutes') s;
INSERT INTO execution_rollups_daily
SELECT workspace_id, instance_id, date_bin('1 day', slot, '2000-01-01 00:00:00+00'),
       sum(executions), sum(success), sum(failed), sum(priced), sum(priced_complete),
       sum(cost_sum), sum(cc_priced), sum(cc_unresolved), sum(cc_excluded),
       sum(cc_observations), sum(mm_rows), sum(mm_sum)
  FROM execution_rollups GROUP BY 1, 2, 3;
"""
_IN_RANGES = """
SELECT (SELECT count(*) FROM execution_rollups x,
               unnest($2::timestamptz[], $3::timestamptz[]) r(lo, hi)
         WHERE x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi)
     + (SELECT count(*) FROM execution_rollups_daily x,
               unnest($4::timestamptz[], $5::timestamptz[]) r(lo, hi)
         WHERE x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi)
"""


async def _create() -> TestDatabase:
    db = await create_database("elova_test_plan")
    try:
        conn = await asyncpg.connect(db.dsn)
        try:
            await conn.execute(_FILL)
        finally:
            await conn.close()
    except BaseException:
        await drop_database(db)
        raise
    return db


@pytest.fixture(scope="module")
def tenants() -> Iterator[TestDatabase]:
    db = asyncio.run(_create())
    yield db
    asyncio.run(drop_database(db))


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _nodes(child))]


async def _check(conn: asyncpg.Connection, sql: str, period: str, label: str = "") -> None:
    workspace_id = UUID(int=WORKSPACES // 2)
    first = await conn.fetchval(stats._FIRST_DATED, workspace_id)
    starts = buckets_for(period, AS_OF, ZoneInfo(ZONE), first).starts
    edge = stats.micros(AS_OF) // stats.SLOT_US * stats.SLOT_US
    columns = stats.segment_arguments(starts, edge)
    args = [workspace_id, *columns]
    where = f"{period} ({label})"
    plan = json.loads(await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, *args))
    nodes = _nodes(plan[0]["Plan"])
    scans = [n for n in nodes if n.get("Relation Name") in ROLLUPS]
    assert scans, f"{where}: no scan of the rollups in {nodes}"
    for scan in scans:
        # An index scan, or a bitmap heap scan of one bitmap index scan, of the range.
        assert scan["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"), (
            where,
            scan,
        )
        cond = scan.get("Index Cond") or scan.get("Recheck Cond", "")
        assert "workspace_id" in cond and "slot >=" in cond and "slot <" in cond, (where, cond)
    removed = sum(
        int(n.get("Rows Removed by Filter", 0)) + int(n.get("Rows Removed by Join Filter", 0))
        for n in nodes
    )
    assert removed == 0, f"{where}: {removed} rows removed"
    # One range a segment: each table's scan runs once per segment of that table.
    segments = {"execution_rollups": len(columns[0]), "execution_rollups_daily": len(columns[4])}
    loops = {s["Relation Name"]: int(s["Actual Loops"]) for s in scans}
    assert {k: v for k, v in loops.items() if v} == {k: v for k, v in segments.items() if v}, where
    # And reads the asked ranges' rows (EXPLAIN rounds rows to a whole number a loop).
    read = sum(int(s["Actual Rows"]) * int(s["Actual Loops"]) for s in scans)
    in_ranges = await conn.fetchval(_IN_RANGES, *args[:3], *args[5:7])
    assert abs(read - in_ranges) <= sum(loops.values()), (where, read, in_ranges)


async def test_segments_read_one_index_range_each(tenants: TestDatabase) -> None:
    """Before and after ANALYZE, custom and generic plans alike (asyncpg keeps the statement
    prepared), every period."""
    conn = await asyncpg.connect(tenants.dsn)
    try:
        for analyzed in (False, True):
            if analyzed:
                await conn.execute("ANALYZE execution_rollups, execution_rollups_daily")
            for plan_mode in ("auto", "force_generic_plan"):
                await conn.execute(f"SET plan_cache_mode = {plan_mode}")
                for period in ("today", "7d", "30d", "all"):
                    await _check(conn, stats._SEGMENTS, period, f"analyzed={analyzed}, {plan_mode}")
    finally:
        await conn.close()
