"""get_many_workspaces and get_workspace: the caller's eligible workspaces (scope
workspaces:read), ordered by name in code-point order, then id.

The list cursor binds the eligible set by digest (through the codec's binding) and anchors on
the last row's id; it is at most a hundred characters, far below the 1024 allowed.
"""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

import asyncpg
import msgspec

from service.auth.caller import WORKSPACES_READ
from service.errors import NotFound
from service.rules.shaping import shorten
from service.store.reads.same_view import same_view_unless
from service.store.reads.workspaces import eligible_workspace_name, workspace, workspace_page
from service.tools.base import LimitArg, Output, Params, Tool, ToolContext, UuidArg, parse_uuid
from service.tools.cursors import check_fresh
from service.tools.paging import anchor_of, anchor_position, check_anchor, fit_page

NAME_LIMIT = 200
# The workspace list spans workspaces, so no single workspace's read generation governs it:
# changes to the set are caught by the eligible-set digest, renames by the anchor check.
_LIST_GENERATION = 0


class GetManyWorkspacesParams(Params):
    limit: LimitArg = 50
    cursor: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | msgspec.UnsetType = (
        msgspec.UNSET
    )


class GetWorkspaceParams(Params):
    workspaceId: UuidArg


class WorkspaceOut(Output):
    id: str
    name: str
    timeZone: str
    role: str


class WorkspacesPage(Output):
    workspaces: list[WorkspaceOut]
    nextCursor: str | None


class WorkspaceResult(Output):
    workspace: WorkspaceOut


def _out(row: asyncpg.Record, role: str) -> WorkspaceOut:
    return WorkspaceOut(
        id=str(row["id"]),
        name=shorten(row["name"], NAME_LIMIT)[0],
        timeZone=row["time_zone"],
        role=role,
    )


async def get_many_workspaces(ctx: ToolContext, params: GetManyWorkspacesParams) -> WorkspacesPage:
    limit = int(params.limit)
    binding = ctx.cursors.binding("get_many_workspaces", ctx.caller, [], limit)
    eligible = list(ctx.caller.eligible)
    after: tuple[str, UUID] | None = None
    # With a cursor, the anchor's name and the page are read from one snapshot.
    paging_on = isinstance(params.cursor, str)
    async with ctx.pool.acquire() as conn, same_view_unless(not paging_on, conn):
        if isinstance(params.cursor, str):
            state = ctx.cursors.open(params.cursor, binding)
            check_fresh(state, _LIST_GENERATION)
            after_id, digest = anchor_of(state.position)
            stored = await eligible_workspace_name(conn, after_id, eligible)
            after = (check_anchor(stored, digest), after_id)
        rows = await workspace_page(conn, eligible, after, limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]

    def build(count: int) -> WorkspacesPage:
        kept = rows[:count]
        cursor = None
        if kept and (more or count < len(rows)):
            last = kept[-1]
            position = anchor_position(last["id"], last["name"])
            cursor = ctx.cursors.issue(binding, _LIST_GENERATION, position)
        return WorkspacesPage(
            workspaces=[_out(row, ctx.caller.eligible[row["id"]]) for row in kept],
            nextCursor=cursor,
        )

    return fit_page(ctx, rows, build)


async def get_workspace(ctx: ToolContext, params: GetWorkspaceParams) -> WorkspaceResult:
    workspace_id = parse_uuid(params.workspaceId)
    role = ctx.workspace_role(workspace_id)
    row = await workspace(ctx.pool, workspace_id)
    if row is None:
        raise NotFound("No such workspace is granted to this connection.")
    return WorkspaceResult(workspace=_out(row, role))


TOOLS: list[Tool[Any]] = [
    Tool("get_many_workspaces", WORKSPACES_READ, GetManyWorkspacesParams, get_many_workspaces),
    Tool("get_workspace", WORKSPACES_READ, GetWorkspaceParams, get_workspace),
]
