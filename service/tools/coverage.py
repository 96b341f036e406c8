"""Coverage as the tools answer it (docs/reading-rules.md).

`firstObservedAt` is the earliest `observedAt` of the records the tool reads (executions or
workflows) in scope; `lastSuccessfulSyncAt` the latest `lastSyncAt` of the instances in
scope; `executionsTruncated` when an instance in scope has `historyComplete` false;
`workflowsTruncated` when one has `workflowInventoryTruncated` true; `partial` is always
true. Scope is the workspace, or the one instance named by instanceId. What it reads is in
service/store/reads/coverage.py.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import asyncpg

from service.rules.shaping import format_optional_instant
from service.store.reads.coverage import Records, read_coverage
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


def coverage_of(
    first_observed: datetime | None,
    last_sync: datetime | None,
    executions_truncated: bool,
    workflows_truncated: bool,
) -> Coverage:
    return Coverage(
        firstObservedAt=format_optional_instant(first_observed),
        lastSuccessfulSyncAt=format_optional_instant(last_sync),
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
    return coverage_of(*await read_coverage(conn, workspace_id, instance_id, records))
