"""get_many_sync_jobs: recent collection jobs of one instance of a workspace.

The window is the instance's newest 100 jobs (createdAt descending, then id descending);
`limit` of them are returned, and `truncated` says the window holds more than `limit`.
Since `limit` is at most 50, that is the same as "more than `limit` jobs exist", so the
query reads `limit + 1` rows and never the whole window.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from service.auth.caller import N8N_READ
from service.errors import NotFound
from service.rules.shaping import format_instant, format_optional_instant
from service.store.reads.instances import instance_workspace
from service.store.reads.sync_jobs import recent_jobs
from service.tools.base import LimitArg, Output, Params, Tool, ToolContext, UuidArg, parse_uuid

WINDOW = 100


class GetManySyncJobsParams(Params):
    workspaceId: UuidArg
    instanceId: UuidArg
    limit: LimitArg = 50


class SyncJobOut(Output):
    id: str
    instanceId: str
    scope: str
    trigger: str
    status: str
    createdAt: str
    finishedAt: str | None
    errorCode: str | None


class SyncJobsResult(Output):
    workspaceId: str
    instanceId: str
    jobs: list[SyncJobOut]
    truncated: bool


def _out(row: asyncpg.Record) -> SyncJobOut:
    return SyncJobOut(
        id=str(row["id"]),
        instanceId=str(row["instance_id"]),
        scope=row["scope"],
        trigger=row["trigger"],
        status=row["status"],
        createdAt=format_instant(row["created_at"]),
        finishedAt=format_optional_instant(row["finished_at"]),
        errorCode=row["error_code"],
    )


async def get_many_sync_jobs(ctx: ToolContext, params: GetManySyncJobsParams) -> SyncJobsResult:
    workspace_id = parse_uuid(params.workspaceId)
    instance_id = parse_uuid(params.instanceId)
    limit = int(params.limit)
    ctx.workspace_role(workspace_id)
    async with ctx.pool.acquire() as conn:
        if await instance_workspace(conn, instance_id) != workspace_id:
            raise NotFound("No such instance in this workspace.")
        rows = await recent_jobs(conn, instance_id, workspace_id, min(limit + 1, WINDOW))
    return SyncJobsResult(
        workspaceId=str(workspace_id),
        instanceId=str(instance_id),
        jobs=[_out(row) for row in rows[:limit]],
        truncated=len(rows) > limit,
    )


TOOLS: list[Tool[Any]] = [
    Tool("get_many_sync_jobs", N8N_READ, GetManySyncJobsParams, get_many_sync_jobs),
]
