"""The statistics rollups (migration 0005): how the load paths keep them equal to the rows.

Two tables hold the same sums per (workspace, instance, slot): `execution_rollups` per
15-minute slot of chronology time, `execution_rollups_daily` per UTC day; undated
executions are in the slot '-infinity' of both. The snapshot loader's upsert moves them by
its difference (`upsert_with_rollups`); bulk writers that COPY into `executions` call
`rebuild_rollups` in the same transaction. Nothing else writes executions. A row's
contribution is defined once, in `_MEASURES`. Why: docs/decisions/scale-queries.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

import asyncpg

# One slot expression for every writer: 15-minute bins from a UTC origin (every IANA
# offset in use is a multiple of 15 minutes), '-infinity' for undated rows.
SLOT_SQL = (
    "CASE WHEN {r}.dated THEN date_bin('15 minutes', {r}.sort_at, '2000-01-01 00:00:00+00')"
    " ELSE '-infinity'::timestamptz END"
)
DAY_SQL = (
    "CASE WHEN {s} = '-infinity' THEN {s} ELSE date_bin('1 day', {s}, '2000-01-01 00:00:00+00') END"
)

# (column, one execution's contribution): the rollup column is the sum over its rows.
_MEASURES = (
    ("executions", "1"),
    ("success", "({r}.status = 'success')::int"),
    ("failed", "({r}.status IN ('error', 'crashed'))::int"),
    ("priced", "({r}.cost_state = 2)::int"),
    ("priced_complete",
     "({r}.cost_state = 2 AND {r}.cc_state IS NOT DISTINCT FROM 'complete')::int"),
    ("cost_sum", "CASE WHEN {r}.cost_state = 2 THEN {r}.cost_amount ELSE 0 END"),
    ("cc_priced", "coalesce({r}.cc_priced, 0)"),
    ("cc_unresolved", "coalesce({r}.cc_unresolved, 0)"),
    ("cc_excluded", "coalesce({r}.cc_excluded, 0)"),
    ("cc_observations", "coalesce({r}.cc_observations, 0)"),
    ("mm_rows", "({r}.cc_missing_mapping IS NOT NULL)::int"),
    ("mm_sum", "coalesce({r}.cc_missing_mapping, 0)"),
)  # fmt: skip
MEASURES = tuple(name for name, _ in _MEASURES)
KEY = ("workspace_id", "instance_id", "slot")
_ROW_COLUMNS = (
    "workspace_id, instance_id, sort_at, dated, status, cost_state, cost_amount, cc_state, "
    "cc_priced, cc_unresolved, cc_excluded, cc_observations, cc_missing_mapping"
)


def _contributions(alias: str, sign: str) -> str:
    parts = [f"{alias}.workspace_id", f"{alias}.instance_id", SLOT_SQL.format(r=alias) + " AS slot"]
    parts += [f"{sign} * ({expr.format(r=alias)}) AS {name}" for name, expr in _MEASURES]
    return ", ".join(parts)


def _add_on_conflict(table: str) -> str:
    sets = ", ".join(f"{m} = {table}.{m} + EXCLUDED.{m}" for m in MEASURES)
    return f"ON CONFLICT (workspace_id, slot, instance_id) DO UPDATE SET {sets}"


_SUMS = ", ".join(f"sum({m})" for m in MEASURES)
_NONZERO = " OR ".join(f"{m} <> 0" for m in MEASURES)


def delta_statement(upsert: str, stage: str) -> str:
    """Wrap an `INSERT INTO executions … ON CONFLICT (id) DO UPDATE …` fed by `stage` (a table
    with an `id` column) so that the same statement moves the rollups by the difference.

    Every part of one statement reads the snapshot taken before it, so `old` holds the rows
    as they were before the upsert replaced them. Returns the rollup keys left empty.
    """
    return f"""
WITH old AS (
    SELECT {_contributions("e", "-1")}
      FROM executions e JOIN {stage} s ON s.id = e.id
), up AS (
    {upsert}
    RETURNING {_ROW_COLUMNS}
), delta AS (
    SELECT workspace_id, instance_id, slot, {_SUMS}
      FROM (SELECT * FROM old UNION ALL SELECT {_contributions("up", "1")} FROM up) c
     GROUP BY workspace_id, instance_id, slot
), changed AS (
    SELECT * FROM delta d ({", ".join(KEY)}, {", ".join(MEASURES)}) WHERE {_NONZERO}
), fine AS (
    INSERT INTO execution_rollups
    SELECT * FROM changed
    {_add_on_conflict("execution_rollups")}
    RETURNING 0 AS level, workspace_id, instance_id, slot, executions
), coarse AS (
    INSERT INTO execution_rollups_daily
    SELECT workspace_id, instance_id, {DAY_SQL.format(s="slot")}, {_SUMS}
      FROM changed GROUP BY 1, 2, 3
    {_add_on_conflict("execution_rollups_daily")}
    RETURNING 1 AS level, workspace_id, instance_id, slot, executions
)
SELECT level, workspace_id, instance_id, slot FROM fine WHERE executions = 0
UNION ALL
SELECT level, workspace_id, instance_id, slot FROM coarse WHERE executions = 0
"""


_DROP_EMPTY = {
    level: f"""
DELETE FROM {table} r
 USING unnest($1::uuid[], $2::uuid[], $3::timestamptz[]) AS k(workspace_id, instance_id, slot)
 WHERE r.workspace_id = k.workspace_id AND r.instance_id = k.instance_id AND r.slot = k.slot
   AND r.executions = 0
"""
    for level, table in ((0, "execution_rollups"), (1, "execution_rollups_daily"))
}


async def upsert_with_rollups(conn: asyncpg.Connection, upsert: str, stage: str) -> None:
    """Run the executions upsert and move the rollups by its difference (see delta_statement);
    rollup rows whose executions all left are deleted."""
    empty = await conn.fetch(delta_statement(upsert, stage))
    for level, query in _DROP_EMPTY.items():
        keys = [r for r in empty if r["level"] == level]
        if keys:
            await conn.execute(
                query,
                [r["workspace_id"] for r in keys],
                [r["instance_id"] for r in keys],
                [r["slot"] for r in keys],
            )


_REBUILD_FINE = f"""
INSERT INTO execution_rollups
SELECT workspace_id, instance_id, slot, {_SUMS}
  FROM (SELECT {_contributions("e", "1")} FROM executions e
         WHERE e.workspace_id = ANY($1::uuid[])) c
 GROUP BY workspace_id, instance_id, slot
"""
_REBUILD_COARSE = f"""
INSERT INTO execution_rollups_daily
SELECT workspace_id, instance_id, {DAY_SQL.format(s="slot")}, {_SUMS}
  FROM execution_rollups WHERE workspace_id = ANY($1::uuid[])
 GROUP BY 1, 2, 3
"""


async def rebuild_rollups(conn: asyncpg.Connection, workspace_ids: Iterable[UUID]) -> None:
    """Recompute both rollup tables of these workspaces from their executions.

    For bulk writers that bypass the snapshot loader (COPY into `executions`): call it after
    the rows are written, inside the same transaction, so readers never see rows without
    their rollups. Reads each workspace's executions once.
    """
    ids = sorted(set(workspace_ids))
    if not ids:
        return
    async with conn.transaction():
        await conn.execute(
            "DELETE FROM execution_rollups WHERE workspace_id = ANY($1::uuid[])", ids
        )
        await conn.execute(
            "DELETE FROM execution_rollups_daily WHERE workspace_id = ANY($1::uuid[])", ids
        )
        await conn.execute(_REBUILD_FINE, ids)
        await conn.execute(_REBUILD_COARSE, ids)
