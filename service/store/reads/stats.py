"""What get_execution_stats counts, two ways that must agree exactly.

`raw_counts` aggregates the execution rows of the window (the reference: obviously right,
cost grows with the window). `rollup_counts` reads the rollups of migration 0005
(service/store/rollups.py) plus the partial slot holding asOf from the rows; a bucket
boundary that is not 15-minute aligned sends the whole call to `raw_counts`. Costs are
exact numeric sums, never rounded. How buckets are split and why:
docs/decisions/scale-queries.md, "Statistics rollups (0005)".
"""

from __future__ import annotations

import decimal
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg

from service.rules.periods import buckets_for, window_start

SLOT_US = 15 * 60 * 1_000_000
DAY_US = 86_400 * 1_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# 1000 digits hold any sum of amounts of at most 56 digits each; Inexact traps otherwise.
_EXACT = decimal.Context(
    prec=1000,
    Emax=decimal.MAX_EMAX,
    Emin=decimal.MIN_EMIN,
    traps=[decimal.Inexact, decimal.InvalidOperation, decimal.Overflow],
)


@dataclass
class Sums:
    """Sums over counted executions (`cost` None: none priced; `missing_mapping` None: none
    carries the field)."""

    executions: int = 0
    success: int = 0
    failed: int = 0
    priced: int = 0
    priced_complete: int = 0
    cost: Decimal | None = None
    cc_priced: int = 0
    cc_unresolved: int = 0
    cc_excluded: int = 0
    cc_observations: int = 0
    missing_mapping: int | None = None

    def add(self, row: Any) -> None:
        """Add a record (or Sums) with these fields; null sums add nothing."""
        for name in ("executions", "success", "failed", "priced", "priced_complete",
                     "cc_priced", "cc_unresolved", "cc_excluded", "cc_observations"):  # fmt: skip
            value = _get(row, name)
            if value is not None:
                setattr(self, name, getattr(self, name) + int(value))
        cost = _get(row, "cost")
        if cost is not None:
            self.cost = cost if self.cost is None else _EXACT.add(self.cost, cost)
        missing = _get(row, "missing_mapping")
        if missing is not None:
            self.missing_mapping = int(missing) + (self.missing_mapping or 0)


def _get(row: Any, name: str) -> Any:
    return getattr(row, name) if isinstance(row, Sums) else row[name]


BucketCounts = tuple[int, int, int]  # success, failed, executions


@dataclass
class Counts:
    """Everything get_execution_stats reads for one call."""

    totals: Sums
    retained: int
    undated: int
    starts: list[datetime] = field(default_factory=list)
    buckets: list[BucketCounts] = field(default_factory=list)


_COUNTED = """
SELECT count(*) AS executions,
       count(*) FILTER (WHERE status = 'success') AS success,
       count(*) FILTER (WHERE status IN ('error', 'crashed')) AS failed,
       count(*) FILTER (WHERE cost_state = 2) AS priced,
       count(*) FILTER (WHERE cost_state = 2 AND cc_state = 'complete') AS priced_complete,
       sum(cost_amount) FILTER (WHERE cost_state = 2) AS cost,
       coalesce(sum(cc_priced), 0) AS cc_priced,
       coalesce(sum(cc_unresolved), 0) AS cc_unresolved,
       coalesce(sum(cc_excluded), 0) AS cc_excluded,
       coalesce(sum(cc_observations), 0) AS cc_observations,
       sum(cc_missing_mapping) AS missing_mapping
  FROM executions
 WHERE workspace_id = $1
"""
# The counted executions: every retained one for `all`, else dated ones in [start, asOf].
_RAW_ALL = _COUNTED
_RAW_WINDOW = _COUNTED + "   AND dated AND sort_at >= $2 AND sort_at <= $3\n"
_RAW_RETAINED = "SELECT count(*) FROM executions WHERE workspace_id = $1"
_RAW_UNDATED = "SELECT count(*) FROM executions WHERE workspace_id = $1 AND NOT dated"
# Where `all` buckets begin: the first entry of executions_dated_order (0008).
_FIRST_DATED = "SELECT min(sort_at) FROM executions WHERE workspace_id = $1 AND dated"
_RAW_BUCKETS = """
SELECT width_bucket(sort_at, $2::timestamptz[]) AS bucket,
       count(*) FILTER (WHERE status = 'success') AS success,
       count(*) FILTER (WHERE status IN ('error', 'crashed')) AS failed,
       count(*) AS executions
  FROM executions
 WHERE workspace_id = $1 AND dated AND sort_at >= $3 AND sort_at <= $4
 GROUP BY 1
"""


async def raw_counts(
    conn: asyncpg.Connection, workspace_id: UUID, period: str, as_of: datetime, zone: ZoneInfo
) -> Counts:
    """The reference: aggregate the rows (call inside one REPEATABLE READ transaction)."""
    start = window_start(period, as_of, zone)
    retained = await conn.fetchval(_RAW_RETAINED, workspace_id)
    undated = await conn.fetchval(_RAW_UNDATED, workspace_id)
    totals = Sums()
    if start is None:
        totals.add(await conn.fetchrow(_RAW_ALL, workspace_id))
        first_dated = await conn.fetchval(_FIRST_DATED, workspace_id)
    else:
        totals.add(await conn.fetchrow(_RAW_WINDOW, workspace_id, start, as_of))
        first_dated = None
    starts = buckets_for(period, as_of, zone, first_dated).starts
    buckets: list[BucketCounts] = []
    if starts:
        rows = await conn.fetch(_RAW_BUCKETS, workspace_id, starts, starts[0], as_of)
        found = {r["bucket"]: (r["success"], r["failed"], r["executions"]) for r in rows}
        buckets = [found.get(index, (0, 0, 0)) for index in range(1, len(starts) + 1)]
    return Counts(totals, retained, undated, starts, buckets)


_ROLLUP_SUMS = """
       sum(x.executions)::bigint AS executions, sum(x.success)::bigint AS success,
       sum(x.failed)::bigint AS failed, sum(x.priced)::bigint AS priced,
       sum(x.priced_complete)::bigint AS priced_complete,
       CASE WHEN sum(x.priced) > 0 THEN sum(x.cost_sum) END AS cost,
       sum(x.cc_priced) AS cc_priced, sum(x.cc_unresolved) AS cc_unresolved,
       sum(x.cc_excluded) AS cc_excluded, sum(x.cc_observations) AS cc_observations,
       CASE WHEN sum(x.mm_rows) > 0 THEN sum(x.mm_sum) END AS missing_mapping"""
# Everything retained (the daily table holds every row: undated in '-infinity', future rows
# in their days): the `all` totals, and what `excludedExecutions` counts from.
_WHOLE = f"""
SELECT {_ROLLUP_SUMS},
       coalesce(sum(x.executions) FILTER (WHERE x.slot = '-infinity'), 0)::bigint AS undated,
       (SELECT min(sort_at) FROM executions WHERE workspace_id = $1 AND dated) AS first_dated
  FROM execution_rollups_daily x
 WHERE x.workspace_id = $1
"""
# Signed segments [lo, hi) of whole slots ($2–$5) and of whole UTC days ($6–$9), each
# tagged with its bucket. A bucket is its whole days, plus or minus the slots between its
# ends and the nearest day edges. Each segment's sums are a LATERAL aggregate over its own
# range: a subquery that aggregates cannot be flattened into a join, so the plan is a loop
# over the segments with one index range scan of (workspace_id, slot) each, read with the
# segment's bounds as parameters. The plan thus does not depend on planner statistics (this
# PostgreSQL may never analyze the tables) or on how many rows other workspaces hold; a
# plain join let the planner read all the workspace's slots and filter them per segment.
_FIELDS = ("executions", "success", "failed", "priced", "priced_complete", "cost_sum",
           "cc_priced", "cc_unresolved", "cc_excluded", "cc_observations", "mm_rows",
           "mm_sum")  # fmt: skip
_SUMMED = ", ".join(f"sum(x.{name}) AS {name}" for name in _FIELDS)
_SIGNED = ", ".join(f"r.sign * s.{name} AS {name}" for name in _FIELDS)
_SEGMENTS = f"""
SELECT x.seg, {_ROLLUP_SUMS}
  FROM (SELECT r.seg, {_SIGNED}
          FROM unnest($2::timestamptz[], $3::timestamptz[], $4::int[], $5::int[])
               AS r(lo, hi, seg, sign)
         CROSS JOIN LATERAL (
               SELECT {_SUMMED}
                 FROM execution_rollups x
                WHERE x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi) s
        UNION ALL
        SELECT r.seg, {_SIGNED}
          FROM unnest($6::timestamptz[], $7::timestamptz[], $8::int[], $9::int[])
               AS r(lo, hi, seg, sign)
         CROSS JOIN LATERAL (
               SELECT {_SUMMED}
                 FROM execution_rollups_daily x
                WHERE x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi) s) x
 GROUP BY x.seg
"""


def micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def aligned(value: datetime) -> bool:
    return micros(value) % SLOT_US == 0


Segment = tuple[int, int, int, int]  # lo, hi (µs), bucket, sign


def split_range(lo: int, hi: int, seg: int) -> tuple[list[Segment], list[Segment]]:
    """[lo, hi) in µs (15-minute aligned) as signed slot and day segments reading the fewest
    rollup rows: whole UTC days [d_lo, d_hi) with the slots between lo and d_lo added (d_lo
    after lo) or subtracted (d_lo before lo), likewise at hi; or only slots."""
    best: tuple[int, list[Segment], list[Segment]] = ((hi - lo) // SLOT_US, [], [])
    if lo < hi:
        best = (best[0], [(lo, hi, seg, 1)], [])
    floor_lo, floor_hi = lo // DAY_US * DAY_US, hi // DAY_US * DAY_US
    for d_lo in {floor_lo, -(-lo // DAY_US) * DAY_US}:
        for d_hi in {floor_hi, -(-hi // DAY_US) * DAY_US}:
            if d_lo >= d_hi:
                continue
            fine = [
                (min(lo, d_lo), max(lo, d_lo), seg, 1 if d_lo > lo else -1),
                (min(hi, d_hi), max(hi, d_hi), seg, 1 if d_hi < hi else -1),
            ]
            fine = [f for f in fine if f[0] < f[1]]
            cost = sum((f[1] - f[0]) // SLOT_US for f in fine) + 1
            if cost < best[0]:
                best = (cost, fine, [(d_lo, d_hi, seg, 1)])
    return best[1], best[2]


def _columns(segments: list[Segment]) -> list[list[Any]]:
    return [
        [from_micros(s[0]) for s in segments],
        [from_micros(s[1]) for s in segments],
        [s[2] for s in segments],
        [s[3] for s in segments],
    ]


def segment_arguments(starts: list[datetime], edge: int) -> list[list[Any]]:
    """$2–$9 of the segment statement: the buckets beginning at `starts` (aligned), the last
    one ending at `edge` (µs, the slot holding asOf)."""
    bounds = [micros(s) for s in starts] + [edge]
    fine: list[Segment] = []
    days: list[Segment] = []
    for index in range(len(starts)):
        more_fine, more_days = split_range(bounds[index], bounds[index + 1], index)
        fine += more_fine
        days += more_days
    return [*_columns(fine), *_columns(days)]


async def rollup_counts(
    conn: asyncpg.Connection, workspace_id: UUID, period: str, as_of: datetime, zone: ZoneInfo
) -> Counts:
    """The same Counts as raw_counts, from the rollups plus the partial slot at asOf (call
    inside one REPEATABLE READ transaction)."""
    whole = await conn.fetchrow(_WHOLE, workspace_id)
    starts = buckets_for(period, as_of, zone, whole["first_dated"]).starts
    if not all(aligned(s) for s in starts):
        return await raw_counts(conn, workspace_id, period, as_of, zone)
    edge = micros(as_of) // SLOT_US * SLOT_US  # the slot holding asOf is read from the rows
    sums = [Sums() for _ in starts]
    if starts:
        args = segment_arguments(starts, edge)
        for row in await conn.fetch(_SEGMENTS, workspace_id, *args):
            sums[row["seg"]].add(row)
        tail = from_micros(max(edge, micros(starts[0])))
        sums[-1].add(await conn.fetchrow(_RAW_WINDOW, workspace_id, tail, as_of))
    if period == "all":
        totals = Sums()
        totals.add(whole)
    else:
        totals = Sums()
        for bucket in sums:
            totals.add(bucket)
    return Counts(
        totals=totals,
        retained=whole["executions"] or 0,
        undated=whole["undated"],
        starts=starts,
        buckets=[(b.success, b.failed, b.executions) for b in sums],
    )
