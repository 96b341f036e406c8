"""get_many_workflows and get_workflow: retained workflow metadata of a workspace.

Lifecycle (docs/reading-rules.md): `current` rows are present, not archived and not definition-less;
the rest are `historical`. Lists are ordered by name (code point), then id, with a keyset
cursor anchored on the last row (see service/tools/paging.py). `costMedian` and
`missingMappingObservations` come from workflow_execution_summaries, kept by the executions
loader. get_workflow embeds the node inventory text stored at load time without re-encoding.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

import asyncpg
import msgspec

from service.auth.caller import N8N_READ
from service.errors import NotFound
from service.rules.shaping import amount_fits, format_instant, format_optional_instant, shorten
from service.store.reads.instances import instance_workspace
from service.store.reads.workflows import Lifecycle, workflow, workflow_name, workflow_page
from service.store.reads.workspaces import read_generation
from service.tools.base import LimitArg, Output, Params, Tool, ToolContext, UuidArg, parse_uuid
from service.tools.cost import Cost, cost_of
from service.tools.coverage import Coverage, coverage
from service.tools.cursors import check_fresh
from service.tools.paging import anchor_of, anchor_position, check_anchor, fit_page

NAME_LIMIT = 200
INSTANCE_NAME_LIMIT = 200
SOURCE_ID_LIMIT = 200


class GetManyWorkflowsParams(Params):
    workspaceId: UuidArg
    instanceId: UuidArg | msgspec.UnsetType = msgspec.UNSET
    lifecycle: Lifecycle = "current"
    limit: LimitArg = 50
    cursor: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)] | msgspec.UnsetType = (
        msgspec.UNSET
    )


class GetWorkflowParams(Params):
    workspaceId: UuidArg
    workflowId: UuidArg


class CostMedian(Output):
    cost: Cost | None
    pricedExecutions: int
    totalExecutions: int
    partial: bool


class WorkflowRow(Output, kw_only=True):
    id: str
    instanceId: str
    instanceName: str
    name: str
    nameTruncated: bool
    sourceId: str
    active: bool
    tracked: bool
    present: bool
    archived: bool | None | msgspec.UnsetType = msgspec.UNSET
    definitionAvailable: bool | msgspec.UnsetType = msgspec.UNSET
    definitionRemovedAt: str | None | msgspec.UnsetType = msgspec.UNSET
    updatedAt: str | None
    nodeCount: int
    observedAt: str
    missingMappingObservations: int | msgspec.UnsetType = msgspec.UNSET
    costMedian: CostMedian | msgspec.UnsetType = msgspec.UNSET


class WorkflowDetail(WorkflowRow, kw_only=True):
    nodes: msgspec.Raw  # the stored inventory: compact JSON, already bounded
    nodesTruncated: bool


class WorkflowsPage(Output):
    workspaceId: str
    workflows: list[WorkflowRow]
    nextCursor: str | None
    coverage: Coverage


class WorkflowResult(Output):
    workspaceId: str
    workflow: WorkflowDetail
    coverage: Coverage


_READ_ONLY = {"isolation": "repeatable_read", "readonly": True}


def _cost_median(row: asyncpg.Record) -> CostMedian | msgspec.UnsetType:
    total = row["total_executions"]
    if total is None or total < 1:
        return msgspec.UNSET
    median = row["median_amount"]
    return CostMedian(
        cost=cost_of(median) if median is not None and amount_fits(median) else None,
        pricedExecutions=row["priced_executions"],
        totalExecutions=total,
        partial=row["cost_partial"],
    )


def _fields(row: asyncpg.Record) -> dict[str, Any]:
    name, name_truncated = shorten(row["name"], NAME_LIMIT)
    missing = row["missing_mapping_observations"]
    return {
        "id": str(row["id"]),
        "instanceId": str(row["instance_id"]),
        "instanceName": shorten(row["instance_name"], INSTANCE_NAME_LIMIT)[0],
        "name": name,
        "nameTruncated": name_truncated,
        "sourceId": shorten(row["source_id"], SOURCE_ID_LIMIT)[0],
        "active": row["active"],
        "tracked": row["tracked"],
        "present": row["present"],
        "archived": row["archived"] if row["archived_known"] else msgspec.UNSET,
        "definitionAvailable": (
            msgspec.UNSET if row["definition_available"] is None else row["definition_available"]
        ),
        "definitionRemovedAt": (
            format_optional_instant(row["definition_removed_at"])
            if row["definition_removed_known"]
            else msgspec.UNSET
        ),
        "updatedAt": format_optional_instant(row["updated_at"]),
        "nodeCount": row["node_count"],
        "observedAt": format_instant(row["observed_at"]),
        "missingMappingObservations": msgspec.UNSET if missing is None else missing,
        "costMedian": _cost_median(row),
    }


async def _read_generation(conn: asyncpg.Connection, workspace_id: UUID) -> int:
    generation = await read_generation(conn, workspace_id)
    if generation is None:
        raise NotFound("No such workspace is granted to this connection.")
    return generation


async def _check_instance(
    conn: asyncpg.Connection, workspace_id: UUID, instance_id: UUID | None
) -> None:
    if instance_id is None:
        return
    if await instance_workspace(conn, instance_id) != workspace_id:
        raise NotFound("No such instance in this workspace.")


async def get_many_workflows(ctx: ToolContext, params: GetManyWorkflowsParams) -> WorkflowsPage:
    workspace_id = parse_uuid(params.workspaceId)
    instance_id = parse_uuid(params.instanceId) if isinstance(params.instanceId, str) else None
    limit = int(params.limit)
    filters = [
        str(workspace_id),
        None if instance_id is None else str(instance_id),
        params.lifecycle,
    ]
    binding = ctx.cursors.binding("get_many_workflows", ctx.caller, filters, limit)
    state = ctx.cursors.open(params.cursor, binding) if isinstance(params.cursor, str) else None
    ctx.workspace_role(workspace_id)
    after: tuple[str, UUID] | None = None
    async with ctx.pool.acquire() as conn, conn.transaction(**_READ_ONLY):
        generation = await _read_generation(conn, workspace_id)
        if state is not None:
            check_fresh(state, generation)
            after_id, digest = anchor_of(state.position)
            stored = await workflow_name(conn, after_id, workspace_id)
            after = (check_anchor(stored, digest), after_id)
        await _check_instance(conn, workspace_id, instance_id)
        rows = await workflow_page(
            conn, workspace_id, instance_id, params.lifecycle, after, limit + 1
        )
        scope = await coverage(conn, workspace_id, instance_id, "workflows")
    more = len(rows) > limit
    rows = rows[:limit]
    listed = [WorkflowRow(**_fields(row)) for row in rows]

    def build(count: int) -> WorkflowsPage:
        cursor = None
        if count and (more or count < len(rows)):
            last = rows[count - 1]
            position = anchor_position(last["id"], last["name"])
            cursor = ctx.cursors.issue(binding, generation, position)
        return WorkflowsPage(
            workspaceId=str(workspace_id),
            workflows=listed[:count],
            nextCursor=cursor,
            coverage=scope,
        )

    return fit_page(ctx, rows, build)


async def get_workflow(ctx: ToolContext, params: GetWorkflowParams) -> WorkflowResult:
    workspace_id = parse_uuid(params.workspaceId)
    workflow_id = parse_uuid(params.workflowId)
    ctx.workspace_role(workspace_id)
    async with ctx.pool.acquire() as conn, conn.transaction(**_READ_ONLY):
        row = await workflow(conn, workflow_id, workspace_id)
        if row is None:
            raise NotFound("No such workflow in this workspace.")
        scope = await coverage(conn, workspace_id, None, "workflows")
    detail = WorkflowDetail(
        **_fields(row),
        nodes=msgspec.Raw(row["nodes_inventory"].encode("utf-8")),
        nodesTruncated=row["nodes_truncated"],
    )
    return WorkflowResult(workspaceId=str(workspace_id), workflow=detail, coverage=scope)


TOOLS: list[Tool[Any]] = [
    Tool("get_many_workflows", N8N_READ, GetManyWorkflowsParams, get_many_workflows),
    Tool("get_workflow", N8N_READ, GetWorkflowParams, get_workflow),
]
