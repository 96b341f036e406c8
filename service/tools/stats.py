"""get_execution_stats: retained-execution totals, buckets and reference cost for a period.

Windows and bucket boundaries come from service/rules/periods.py (zoneinfo); the counts
from service/store/reads/stats.py, which reads the 15-minute/daily rollups and only the
rows of the partial slot at asOf (the raw aggregation there is the reference it must equal).
Costs are exact decimal sums, formatted without trailing zeros.
"""

from __future__ import annotations

from datetime import UTC
from typing import Any

import msgspec

from service.auth.caller import N8N_READ
from service.rules.shaping import amount_fits, format_local, resolve_zone
from service.store.reads.stats import Sums, rollup_counts
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
from service.tools.cost import Cost, CostCoverage, cost_of
from service.tools.coverage import Coverage
from service.tools.execution_scope import read_scope


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


async def get_execution_stats(ctx: ToolContext, params: StatsParams) -> Stats:
    workspace_id = parse_uuid(params.workspaceId)
    zone = resolve_zone(params.timeZone)  # precedence: the zone before NOT_FOUND
    as_of = ctx.now.astimezone(UTC)
    async with ctx.pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
        # One connection and one snapshot for every read, so totals, buckets and excluded
        # agree. (JIT is off for the pool's connections — service/store/db.py: the segment
        # statement's row estimate is far above what it reads, and compiling cost more than
        # running it.)
        scope = await read_scope(ctx, conn, workspace_id)  # NOT_FOUND for another workspace
        counts = await rollup_counts(conn, workspace_id, params.period, as_of, zone)

    totals = counts.totals
    cost, cost_coverage = _cost(totals)
    return Stats(
        workspaceId=str(workspace_id),
        period=params.period,
        timeZone=params.timeZone,
        asOf=format_local(as_of, zone),
        totals=Totals(
            executions=totals.executions,
            success=totals.success,
            failed=totals.failed,
            other=totals.executions - totals.success - totals.failed,
            excludedExecutions=counts.retained - totals.executions,
            undatedExecutions=counts.undated,
        ),
        buckets=[
            Bucket(
                at=format_local(at, zone),
                success=success,
                failed=failed,
                other=executions - success - failed,
            )
            for at, (success, failed, executions) in zip(counts.starts, counts.buckets, strict=True)
        ],
        cost=cost,
        costCoverage=cost_coverage,
        usage=None,
        coverage=scope.coverage,
        sync=Sync(executionPollIntervalSeconds=scope.poll_interval_seconds),
    )


def _cost(totals: Sums) -> tuple[Cost | None, CostCoverage]:
    """The exact sum and its coverage (docs/reading-rules.md)."""
    counted, priced = totals.executions, totals.priced
    amount = totals.cost
    if counted == 0:
        state = "not_applicable"
    elif priced == 0:
        state = "unavailable"
    elif priced == counted and totals.priced_complete == counted:
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
        pricedComponents=totals.cc_priced,
        unresolvedComponents=totals.cc_unresolved,
        excludedComponents=totals.cc_excluded,
        observations=totals.cc_observations,
    )
    if totals.missing_mapping is not None:
        cover.missingMappingObservations = totals.missing_mapping
    return cost, cover


TOOLS: list[Tool[Any]] = [
    Tool("get_execution_stats", N8N_READ, StatsParams, get_execution_stats, authorizes=True),
]
