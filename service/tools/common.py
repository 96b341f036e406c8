"""Output pieces shared by several tools: coverage, reference cost, cost coverage.

Coverage (docs/reading-rules.md): `firstObservedAt` is the earliest `observedAt` of the records the
tool reads (executions or workflows) in scope; `lastSuccessfulSyncAt` the latest `lastSyncAt`
of the instances in scope; `executionsTruncated` when an instance in scope has
`historyComplete` false; `workflowsTruncated` when one has `workflowInventoryTruncated` true;
`partial` is always true. Scope is the workspace, or the one instance named by instanceId.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Literal
from uuid import UUID

import asyncpg
import msgspec

from service.rules.shaping import format_amount, format_instant
from service.tools.base import Output

# Output Structs omit fields equal to their default (omit_defaults=True, so that optional
# fields set to msgspec.UNSET disappear). Required fields therefore never have a default,
# even constant ones: they are passed explicitly.


class Coverage(Output):
    firstObservedAt: str | None
    lastSuccessfulSyncAt: str | None
    partial: bool
    workflowsTruncated: bool
    executionsTruncated: bool


class Cost(Output):
    amount: str
    currency: str
    kind: str
    basis: str


def cost_of(amount: Decimal) -> Cost:
    return Cost(amount=format_amount(amount), currency="USD", kind="estimated", basis="openrouter")


class CostCoverage(Output):
    state: str
    pricedComponents: int
    unresolvedComponents: int
    excludedComponents: int
    observations: int
    missingMappingObservations: int | msgspec.UnsetType = msgspec.UNSET


Records = Literal["executions", "workflows"]

# The two halves of coverage for workspace $1 and the optional instance $2, as SQL other
# statements embed (service/tools/execution_scope.py reads them with the workspace in one
# round trip): the instance side (one row) and the earliest observedAt of the records read.
INSTANCE_SIDE_SQL = """
    SELECT max(last_sync_at) AS last_sync,
           coalesce(bool_or(NOT history_complete), false) AS executions_truncated,
           coalesce(bool_or(workflow_inventory_truncated), false) AS workflows_truncated
      FROM instances
     WHERE workspace_id = $1 AND ($2::uuid IS NULL OR id = $2)
"""
FIRST_OBSERVED_SQL: dict[Records, str] = {
    "executions": """
        SELECT min(observed_at) FROM executions
         WHERE workspace_id = $1 AND ($2::uuid IS NULL OR instance_id = $2)""",
    "workflows": """
        SELECT min(observed_at) FROM workflows
         WHERE workspace_id = $1 AND ($2::uuid IS NULL OR instance_id = $2)""",
}


def coverage_of(
    first_observed: datetime | None,
    last_sync: datetime | None,
    executions_truncated: bool,
    workflows_truncated: bool,
) -> Coverage:
    return Coverage(
        firstObservedAt=None if first_observed is None else format_instant(first_observed),
        lastSuccessfulSyncAt=None if last_sync is None else format_instant(last_sync),
        partial=True,
        workflowsTruncated=bool(workflows_truncated),
        executionsTruncated=bool(executions_truncated),
    )


async def coverage(
    conn: asyncpg.Connection | asyncpg.Pool,
    workspace_id: UUID,
    instance_id: UUID | None,
    records: Records,
) -> Coverage:
    side = await conn.fetchrow(INSTANCE_SIDE_SQL, workspace_id, instance_id)
    first = await conn.fetchval(FIRST_OBSERVED_SQL[records], workspace_id, instance_id)
    assert side is not None
    return coverage_of(
        first, side["last_sync"], side["executions_truncated"], side["workflows_truncated"]
    )
