"""What the execution tools read before their rows: the workspace (zone, read generation,
poll interval), whether the instanceId / workflowId filters belong to it, and the coverage of
the scope (docs/reading-rules.md), in one statement (service/store/reads/executions.py).

One round trip instead of four on the hot path of get_many_executions; for a pending caller
(`Tool.authorizes`: dispatch left the approval to the tool) the same statement also reads
the approval, one round trip instead of two. Checks stay in the order of docs/tools.md,
Errors: the caller reads `read_generation` (cursor staleness) before calling `check_filters`
(NOT_FOUND for a filter outside the workspace).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

import asyncpg
import msgspec

from service.errors import NotFound
from service.store.reads.executions import APPROVAL_AND_SCOPE, SCOPE, read_first_page
from service.tools.base import ToolContext
from service.tools.coverage import Coverage, coverage_of


class ExecutionScope(msgspec.Struct, frozen=True):
    time_zone: str
    read_generation: int
    poll_interval_seconds: int
    coverage: Coverage
    instance_found: bool
    workflow_instance: UUID | None
    granted: bool = True  # False: the workspace is not granted (or gone): nothing else is set

    def require_granted(self) -> None:
        """NOT_FOUND for a workspace not granted (a scope read with `not_found_later`)."""
        if not self.granted:
            raise NotFound(_NOT_GRANTED)

    def check_filters(self, instance_id: UUID | None, workflow_id: UUID | None) -> bool:
        """NOT_FOUND for an instance or workflow outside the workspace; False when no row
        can match both (a workflow's executions all belong to its instance: the loader
        checks it), so such a page is known empty without reading the workflow's rows."""
        if instance_id is not None and not self.instance_found:
            raise NotFound("No such instance in this workspace.")
        if workflow_id is not None:
            if self.workflow_instance is None:
                raise NotFound("No such workflow in this workspace.")
            return instance_id is None or self.workflow_instance == instance_id
        return True


_NOT_GRANTED = "No such workspace is granted to this connection."


async def read_scope(
    ctx: ToolContext,
    conn: asyncpg.Connection,
    workspace_id: UUID,
    instance_id: UUID | None = None,
    workflow_id: UUID | None = None,
    *,
    not_found_later: bool = False,
) -> ExecutionScope:
    """The scope of an execution tool call; NOT_FOUND for a workspace not granted, unless
    `not_found_later` (then `granted` is False and the caller raises it in its turn).

    A pending caller is confirmed by the same statement (`ToolContext.authorize`: 401/403
    before anything else); a confirmed one is checked against its eligible set first.
    """
    if ctx.caller.confirmed:
        granted = ctx.caller.role_in(workspace_id) is not None
        row = None
        if granted:
            row = await conn.fetchrow(SCOPE, workspace_id, instance_id, workflow_id)
    else:
        row = await conn.fetchrow(
            APPROVAL_AND_SCOPE, workspace_id, instance_id, workflow_id, ctx.caller.approval_id
        )
        return _confirmed_scope(ctx, workspace_id, row, not_found_later)
    return _scope_of(row, granted, not_found_later)


def _confirmed_scope(
    ctx: ToolContext, workspace_id: UUID, row: Mapping[str, Any] | None, not_found_later: bool
) -> ExecutionScope:
    """Confirm a pending caller from the approval columns of `row` (401/403), then the
    scope those columns came with."""
    ctx.authorize(row)
    granted = ctx.caller.role_in(workspace_id) is not None
    return _scope_of(row, granted, not_found_later)


def _scope_of(
    row: Mapping[str, Any] | None, granted: bool, not_found_later: bool
) -> ExecutionScope:
    if row is None or row["time_zone"] is None or not granted:
        if not not_found_later:
            raise NotFound(_NOT_GRANTED)
        return _UNGRANTED
    return ExecutionScope(
        time_zone=row["time_zone"],
        read_generation=row["read_generation"],
        poll_interval_seconds=row["execution_poll_interval_seconds"],
        coverage=coverage_of(
            row["first_observed"],
            row["last_sync"],
            row["executions_truncated"],
            row["workflows_truncated"],
        ),
        instance_found=bool(row["instance_found"]),
        workflow_instance=row["workflow_instance"],
    )


async def read_scope_and_page(
    ctx: ToolContext,
    conn: asyncpg.Connection,
    workspace_id: UUID,
    instance_id: UUID | None,
    workflow_id: UUID | None,
    page_sql: str,
    page_arguments: Sequence[Any],
) -> tuple[ExecutionScope, list[asyncpg.Record]]:
    """`read_scope(..., not_found_later=True)` for a pending caller and the rows of
    `page_sql` (its parameters numbered from FIRST_PAGE_PARAMETER, $1 the workspace) in
    ONE statement. The rows are returned only once `ToolContext.authorize` confirmed the
    caller; NOT_FOUND is left to the caller (`ExecutionScope.require_granted`)."""
    if ctx.caller.confirmed:
        raise RuntimeError("read_scope_and_page is for a pending caller")
    head, page = await read_first_page(
        conn, workspace_id, instance_id, workflow_id, ctx.caller.approval_id,
        page_sql, page_arguments,
    )  # fmt: skip
    scope = _confirmed_scope(ctx, workspace_id, head, not_found_later=True)
    return scope, page if scope.granted else []


_UNGRANTED = ExecutionScope(
    time_zone="UTC",
    read_generation=0,
    poll_interval_seconds=0,
    coverage=coverage_of(None, None, False, False),
    instance_found=False,
    workflow_instance=None,
    granted=False,
)
