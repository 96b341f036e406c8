"""get_many_executions and get_execution: retained execution rows, newest first.

Order is coalesce(startedAt, createdAt, observedAt) descending, then id descending (the
statements: service/store/reads/executions.py). A period window (docs/reading-rules.md)
keeps dated rows whose chronology lies in [start, asOf]; for dated rows sort_at is the
chronology, so the window is a range on the same index. The first page's asOf and window
start travel in the cursor, so a walk reads one stable window.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

import asyncpg
import msgspec

from service.auth.caller import N8N_READ
from service.errors import NotFound
from service.rules.periods import window_start
from service.rules.shaping import format_local, resolve_zone
from service.store.reads.executions import (
    FIRST_PAGE_PARAMETER,
    ONE_EXECUTION,
    ROW_COLUMNS,
    page_query,
)
from service.store.reads.same_view import same_view, same_view_unless
from service.tools.base import (
    LimitArg,
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
from service.tools.cursors import check_fresh
from service.tools.execution_scope import read_scope, read_scope_and_page
from service.tools.paging import fit_page

WORKFLOW_NAME_LENGTH = 100
LABEL_LENGTH = 200  # instanceName, sourceId, sourceWorkflowId: shortened silently
StatusFilter = Literal[
    "success", "failed", "error", "crashed", "running", "waiting", "canceled", "new", "unknown"
]
CursorArg = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ExecutionRow(Output):
    id: str
    instanceId: str
    instanceName: str
    workflowId: str | None
    workflowName: str
    workflowNameTruncated: bool
    sourceId: str
    sourceWorkflowId: str
    status: str
    startedAt: str | None
    createdAt: str | None
    stoppedAt: str | None
    durationMs: int | None
    observedAt: str
    sourceMissing: bool
    cost: Cost | None | msgspec.UnsetType = msgspec.UNSET
    costCoverage: CostCoverage | msgspec.UnsetType = msgspec.UNSET


class ManyExecutionsParams(Params):
    workspaceId: UuidArg
    instanceId: UuidArg | msgspec.UnsetType = msgspec.UNSET
    workflowId: UuidArg | msgspec.UnsetType = msgspec.UNSET
    status: StatusFilter | msgspec.UnsetType = msgspec.UNSET
    period: Period = "all"
    timeZone: TimeZoneArg | msgspec.UnsetType = msgspec.UNSET
    limit: LimitArg = 50
    cursor: CursorArg | msgspec.UnsetType = msgspec.UNSET


class ManyExecutions(Output):
    workspaceId: str
    period: str
    timeZone: str
    asOf: str
    executions: list[ExecutionRow]
    nextCursor: str | None
    coverage: Coverage


class ExecutionParams(Params):
    workspaceId: UuidArg
    executionId: UuidArg


class OneExecution(Output):
    workspaceId: str
    execution: ExecutionRow
    coverage: Coverage
    history: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


def shape_row(row: Sequence[Any]) -> ExecutionRow:
    """A stored execution as the tools return it (cost absent / null / present as stored),
    from a row whose first columns are ROW_COLUMNS in their order (every execution
    statement's are), unpacked by position.

    Run for every row of every page: the shortening of `shorten` is written out here (a
    page of 50 rows would otherwise make 200 calls of it), and the Struct is built from
    positional arguments in its field order."""
    (
        execution_id, instance_id, workflow_id, name, source_id, source_workflow_id, status,
        started_at, created_at, stopped_at, observed_at, duration_ms, source_missing, _,
        cost_state, cost_amount, cc_state, cc_priced, cc_unresolved, cc_excluded,
        cc_observations, cc_missing_mapping, instance_name,
    ) = row if len(row) == _ROW_WIDTH else row[:_ROW_WIDTH]  # fmt: skip
    name_cut = len(name) > WORKFLOW_NAME_LENGTH
    if name_cut:
        name = name[:WORKFLOW_NAME_LENGTH]
    out = ExecutionRow(
        str(execution_id),  # id
        str(instance_id),  # instanceId
        instance_name if len(instance_name) <= LABEL_LENGTH else instance_name[:LABEL_LENGTH],
        None if workflow_id is None else str(workflow_id),  # workflowId
        name,  # workflowName
        name_cut,  # workflowNameTruncated
        source_id if len(source_id) <= LABEL_LENGTH else source_id[:LABEL_LENGTH],
        source_workflow_id  # sourceWorkflowId
        if len(source_workflow_id) <= LABEL_LENGTH
        else source_workflow_id[:LABEL_LENGTH],
        status,
        started_at,
        created_at,
        stopped_at,
        duration_ms,
        observed_at,
        source_missing,
    )
    if cost_state == 1:
        out.cost = None
    elif cost_state == 2:
        out.cost = cost_of(cost_amount)
    if cc_state is not None:
        out.costCoverage = CostCoverage(
            state=cc_state,
            pricedComponents=cc_priced,
            unresolvedComponents=cc_unresolved,
            excludedComponents=cc_excluded,
            observations=cc_observations,
        )
        if cc_missing_mapping is not None:
            out.costCoverage.missingMappingObservations = cc_missing_mapping
    return out


_ROW_WIDTH = len(ROW_COLUMNS)


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


def _from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


def _filters(
    instance_id: UUID | None,
    workflow_id: UUID | None,
    status: str | None,
    window: tuple[datetime, datetime] | None,
    after: tuple[datetime, UUID] | None,
) -> dict[str, tuple[Any, ...]]:
    filters: dict[str, tuple[Any, ...]] = {}
    if instance_id is not None:
        filters["instance" if workflow_id is None else "instance_check"] = (instance_id,)
    if workflow_id is not None:
        filters["workflow"] = (workflow_id,)
    if status == "failed":
        filters["failed"] = ()
    elif status is not None:
        filters["status"] = (status,)
    if window is not None:
        filters["window"] = window
    if after is not None:
        filters["after"] = after
    return filters


def _opt_uuid(value: str | msgspec.UnsetType) -> UUID | None:
    return None if isinstance(value, msgspec.UnsetType) else parse_uuid(value)


async def get_many_executions(ctx: ToolContext, params: ManyExecutionsParams) -> ManyExecutions:
    workspace_id = parse_uuid(params.workspaceId)
    limit = int(params.limit)
    instance_id = _opt_uuid(params.instanceId)
    workflow_id = _opt_uuid(params.workflowId)
    status = None if isinstance(params.status, msgspec.UnsetType) else params.status
    explicit_zone = None if isinstance(params.timeZone, msgspec.UnsetType) else params.timeZone
    if explicit_zone is not None:
        resolve_zone(explicit_zone)  # precedence: a bad zone before the cursor
    # A first page whose window does not depend on the workspace's zone, for a caller whose
    # approval is still to be read: approval, scope and rows in one statement.
    one_statement = (
        not ctx.caller.confirmed
        and isinstance(params.cursor, msgspec.UnsetType)
        and (params.period == "all" or explicit_zone is not None)
    )
    prefetched: list[asyncpg.Record] | None = None
    # One pooled connection for every read of the call (not one checkout a statement); the
    # scope and the page read one snapshot when they are two statements.
    async with ctx.pool.acquire() as conn, same_view_unless(one_statement, conn):
        # Confirms the caller (401/403) before any later check; NOT_FOUND waits its turn.
        if one_statement:
            as_of = ctx.now.astimezone(UTC)
            start = window_start(params.period, as_of, resolve_zone(explicit_zone or "UTC"))
            window = None if start is None else (start, as_of)
            filters = _filters(instance_id, workflow_id, status, window, None)
            query, arguments = page_query(filters, limit + 1, first=FIRST_PAGE_PARAMETER)
            scope, prefetched = await read_scope_and_page(
                ctx, conn, workspace_id, instance_id, workflow_id,
                query, arguments,
            )  # fmt: skip
        else:
            scope = await read_scope(
                ctx, conn, workspace_id, instance_id, workflow_id, not_found_later=True
            )
        # The zone as sent (None: the workspace's) is bound; the window rides in the cursor.
        binding = ctx.cursors.binding(
            "get_many_executions",
            ctx.caller,
            [str(workspace_id), _s(instance_id), _s(workflow_id), status, params.period,
             explicit_zone],
            limit,
        )  # fmt: skip
        state = None
        if not isinstance(params.cursor, msgspec.UnsetType):
            state = ctx.cursors.open(params.cursor, binding)
        scope.require_granted()
        if state is not None:
            check_fresh(state, scope.read_generation)
        can_match = scope.check_filters(instance_id, workflow_id)
        zone_name = explicit_zone or scope.time_zone
        zone = resolve_zone(zone_name)

        after: tuple[datetime, UUID] | None = None
        if prefetched is not None:
            pass  # as_of and start were fixed with the statement
        elif state is None:
            as_of = ctx.now.astimezone(UTC)
            start = window_start(params.period, as_of, zone)
        else:
            as_of_us, start_us, sort_us, last_id = state.position
            as_of = _from_micros(as_of_us)
            start = None if start_us is None else _from_micros(start_us)
            after = (_from_micros(sort_us), UUID(bytes=last_id))

        window = None if start is None else (start, as_of)
        rows: list[asyncpg.Record] = []
        if prefetched is not None:
            rows = prefetched if can_match else []
        elif can_match:
            filters = _filters(instance_id, workflow_id, status, window, after)
            query, arguments = page_query(filters, limit + 1)
            rows = await conn.fetch(query, workspace_id, *arguments)
    more = len(rows) > limit
    rows = rows[:limit]
    shaped = [shape_row(r) for r in rows]
    as_of_text = format_local(as_of, zone)

    def build(count: int) -> ManyExecutions:
        next_cursor = None
        if count < len(rows) or more:
            last = rows[count - 1]
            position = [
                _micros(as_of),
                None if start is None else _micros(start),
                last["sort_us"],
                last["id"].bytes,
            ]
            next_cursor = ctx.cursors.issue(binding, scope.read_generation, position)
        return ManyExecutions(
            workspaceId=str(workspace_id),
            period=params.period,
            timeZone=zone_name,
            asOf=as_of_text,
            executions=shaped[:count],
            nextCursor=next_cursor,
            coverage=scope.coverage,
        )

    return fit_page(ctx, shaped, build)


def _s(value: UUID | None) -> str | None:
    return None if value is None else str(value)


async def get_execution(ctx: ToolContext, params: ExecutionParams) -> OneExecution:
    workspace_id = parse_uuid(params.workspaceId)
    execution_id = parse_uuid(params.executionId)
    async with ctx.pool.acquire() as conn, same_view(conn):
        scope = await read_scope(ctx, conn, workspace_id)
        row = await conn.fetchrow(ONE_EXECUTION, execution_id, workspace_id)
        if row is None:
            raise NotFound("No such execution in this workspace.")
    out = OneExecution(
        workspaceId=str(workspace_id), execution=shape_row(row), coverage=scope.coverage
    )
    if row["history"] is not None:
        out.history = msgspec.Raw(row["history"].encode("utf-8"))
    return out


TOOLS: list[Tool[Any]] = [
    Tool(
        "get_many_executions", N8N_READ, ManyExecutionsParams, get_many_executions, authorizes=True
    ),
    Tool("get_execution", N8N_READ, ExecutionParams, get_execution, authorizes=True),
]
