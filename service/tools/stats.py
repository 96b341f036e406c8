"""get_execution_stats: retained-execution totals, buckets and reference cost for a period.

Windows and bucket boundaries come from service/tools/periods.py (zoneinfo); the database
only counts. For dated rows `sort_at` is the chronology time coalesce(startedAt, createdAt),
so a window is a range on the executions_order index and a bucket is the index of the last
boundary at or before it (width_bucket over the boundary array). Costs are summed as exact
numeric in the database and formatted without trailing zeros.
"""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg
import msgspec

from service.errors import NotFound
from service.tools.base import (
    Output,
    Params,
    Period,
    TimeZoneArg,
    Tool,
    ToolContext,
    UuidArg,
    parse_uuid,
)
from service.tools.common import Cost, CostCoverage, Coverage, cost_of, coverage
from service.tools.periods import buckets_for, window_start
from service.tools.shaping import amount_fits, format_local, resolve_zone

N8N_READ = "n8n:read"


class StatsParams(Params):
    workspaceId: UuidArg
    period: Period
    timeZone: TimeZoneArg


class Totals(Output):
    executions: int
    success: int
    failed: int
    other: int
    excludedExecutions: int
    undatedExecutions: int


class Bucket(Output):
    at: str
    success: int
    failed: int
    other: int


class Sync(Output):
    executionPollIntervalSeconds: int


class Stats(Output):
    workspaceId: str
    period: str
    timeZone: str
    asOf: str
    totals: Totals
    buckets: list[Bucket]
    cost: Cost | None
    usage: None
    coverage: Coverage
    sync: Sync
    costCoverage: CostCoverage | msgspec.UnsetType = msgspec.UNSET


_WORKSPACE = "SELECT read_generation, execution_poll_interval_seconds FROM workspaces WHERE id = $1"

# Everything retained in scope: what `excludedExecutions` and `undatedExecutions` count from.
_RETAINED = "SELECT count(*) FROM executions WHERE workspace_id = $1"
_UNDATED = "SELECT count(*) FROM executions WHERE workspace_id = $1 AND NOT dated"
# Where `all` buckets begin: the first entry of executions_dated_chronology.
_FIRST_DATED = "SELECT min(sort_at) FROM executions WHERE workspace_id = $1 AND dated"

_COUNTED = """
SELECT count(*) AS executions,
       count(*) FILTER (WHERE status = 'success') AS success,
       count(*) FILTER (WHERE status IN ('error', 'crashed')) AS failed,
       count(*) FILTER (WHERE cost_state = 2) AS priced,
       count(*) FILTER (WHERE cost_state = 2 AND cc_state = 'complete') AS priced_complete,
       sum(cost_amount) FILTER (WHERE cost_state = 2) AS cost,
       coalesce(sum(cc_priced), 0)::bigint AS cc_priced,
       coalesce(sum(cc_unresolved), 0)::bigint AS cc_unresolved,
       coalesce(sum(cc_excluded), 0)::bigint AS cc_excluded,
       coalesce(sum(cc_observations), 0)::bigint AS cc_observations,
       sum(cc_missing_mapping)::bigint AS cc_missing_mapping
  FROM executions
 WHERE workspace_id = $1
"""
# The counted executions: every retained one for `all`, else dated ones in [start, asOf].
_TOTALS_ALL = _COUNTED
_TOTALS_WINDOW = _COUNTED + "   AND dated AND sort_at >= $2 AND sort_at <= $3\n"

_BUCKETS = """
SELECT width_bucket(sort_at, $2::timestamptz[]) AS bucket,
       count(*) FILTER (WHERE status = 'success') AS success,
       count(*) FILTER (WHERE status IN ('error', 'crashed')) AS failed,
       count(*) AS executions
  FROM executions
 WHERE workspace_id = $1 AND dated AND sort_at >= $3 AND sort_at <= $4
 GROUP BY 1
"""


async def get_execution_stats(ctx: ToolContext, params: StatsParams) -> Stats:
    workspace_id = parse_uuid(params.workspaceId)
    zone = resolve_zone(params.timeZone)  # precedence: the zone before NOT_FOUND
    ctx.workspace_role(workspace_id)
    workspace = await ctx.pool.fetchrow(_WORKSPACE, workspace_id)
    if workspace is None:
        raise NotFound("No such workspace is granted to this connection.")
    as_of = ctx.now.astimezone(UTC)
    start = window_start(params.period, as_of, zone)

    async with ctx.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        # One snapshot for every count, so totals, buckets and excluded agree.
        retained = await conn.fetchval(_RETAINED, workspace_id)
        undated = await conn.fetchval(_UNDATED, workspace_id)
        if start is None:
            totals = await conn.fetchrow(_TOTALS_ALL, workspace_id)
            first_dated = await conn.fetchval(_FIRST_DATED, workspace_id)
        else:
            totals = await conn.fetchrow(_TOTALS_WINDOW, workspace_id, start, as_of)
            first_dated = None
        plan = buckets_for(params.period, as_of, zone, first_dated)
        buckets = await _buckets(conn, workspace_id, plan.starts, as_of, zone)
    cover = await coverage(ctx.pool, workspace_id, None, "executions")

    counted = totals["executions"]
    cost, cost_coverage = _cost(totals)
    return Stats(
        workspaceId=str(workspace_id),
        period=params.period,
        timeZone=params.timeZone,
        asOf=format_local(as_of, zone),
        totals=Totals(
            executions=counted,
            success=totals["success"],
            failed=totals["failed"],
            other=counted - totals["success"] - totals["failed"],
            excludedExecutions=retained - counted,
            undatedExecutions=undated,
        ),
        buckets=buckets,
        cost=cost,
        costCoverage=cost_coverage,
        usage=None,
        coverage=cover,
        sync=Sync(executionPollIntervalSeconds=workspace["execution_poll_interval_seconds"]),
    )


async def _buckets(
    conn: asyncpg.Connection,
    workspace_id: UUID,
    starts: list[datetime],
    as_of: datetime,
    zone: ZoneInfo,
) -> list[Bucket]:
    if not starts:
        return []
    counts = {
        r["bucket"]: r for r in await conn.fetch(_BUCKETS, workspace_id, starts, starts[0], as_of)
    }
    out = []
    for index, at in enumerate(starts, start=1):
        row = counts.get(index)
        success = 0 if row is None else row["success"]
        failed = 0 if row is None else row["failed"]
        total = 0 if row is None else row["executions"]
        out.append(
            Bucket(
                at=format_local(at, zone),
                success=success,
                failed=failed,
                other=total - success - failed,
            )
        )
    return out


def _cost(totals: asyncpg.Record) -> tuple[Cost | None, CostCoverage]:
    """The exact sum and its coverage (SEMANTICS §3, §9)."""
    counted, priced = totals["executions"], totals["priced"]
    amount: Decimal | None = totals["cost"]
    if counted == 0:
        state = "not_applicable"
    elif priced == 0:
        state = "unavailable"
    elif priced == counted and totals["priced_complete"] == counted:
        state = "complete"
    else:
        state = "partial"
    cost = None
    if amount is not None:
        if amount_fits(amount):
            cost = cost_of(amount)
        else:  # beyond the schema's 38 integer digits: no amount can be stated
            state = "partial"
    cover = CostCoverage(
        state=state,
        pricedComponents=totals["cc_priced"],
        unresolvedComponents=totals["cc_unresolved"],
        excludedComponents=totals["cc_excluded"],
        observations=totals["cc_observations"],
    )
    if totals["cc_missing_mapping"] is not None:
        cover.missingMappingObservations = totals["cc_missing_mapping"]
    return cost, cover


TOOLS: list[Tool[Any]] = [
    Tool("get_execution_stats", N8N_READ, StatsParams, get_execution_stats),
]
