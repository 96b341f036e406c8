"""get_many_instances: the first 20 instances of a workspace by name (code point), then id,
with their collection state and how many current workflows each holds. No cursor."""

from __future__ import annotations

from typing import Any

import asyncpg

from service.auth.caller import N8N_READ
from service.rules.shaping import format_optional_instant, shorten
from service.store.reads.instances import first_instances
from service.tools.base import Output, Params, Tool, ToolContext, UuidArg, parse_uuid

NAME_LIMIT = 200


class GetManyInstancesParams(Params):
    workspaceId: UuidArg


class SyncStateOut(Output):
    pending: bool
    scope: str | None
    status: str | None
    errorCode: str | None
    lastAttemptAt: str | None


class InstanceOut(Output):
    id: str
    name: str
    status: str
    autoSyncEnabled: bool
    workflowIntervalMinutes: int
    lastSyncAt: str | None
    lastWorkflowSyncAt: str | None
    lastExecutionSyncAt: str | None
    workflowCount: int
    historyComplete: bool
    syncState: SyncStateOut


class InstancesResult(Output):
    workspaceId: str
    instances: list[InstanceOut]


def _out(row: asyncpg.Record) -> InstanceOut:
    return InstanceOut(
        id=str(row["id"]),
        name=shorten(row["name"], NAME_LIMIT)[0],
        status=row["status"],
        autoSyncEnabled=row["auto_sync_enabled"],
        workflowIntervalMinutes=row["workflow_interval_minutes"],
        lastSyncAt=format_optional_instant(row["last_sync_at"]),
        lastWorkflowSyncAt=format_optional_instant(row["last_workflow_sync_at"]),
        lastExecutionSyncAt=format_optional_instant(row["last_execution_sync_at"]),
        workflowCount=row["workflow_count"],
        historyComplete=row["history_complete"],
        syncState=SyncStateOut(
            pending=row["sync_pending"],
            scope=row["sync_scope"],
            status=row["sync_status"],
            errorCode=row["sync_error_code"],
            lastAttemptAt=format_optional_instant(row["sync_last_attempt_at"]),
        ),
    )


async def get_many_instances(ctx: ToolContext, params: GetManyInstancesParams) -> InstancesResult:
    workspace_id = parse_uuid(params.workspaceId)
    ctx.workspace_role(workspace_id)
    rows = await first_instances(ctx.pool, workspace_id)
    return InstancesResult(workspaceId=str(workspace_id), instances=[_out(r) for r in rows])


TOOLS: list[Tool[Any]] = [
    Tool("get_many_instances", N8N_READ, GetManyInstancesParams, get_many_instances),
]
