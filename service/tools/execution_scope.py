"""What the execution tools read before their rows, in one statement: the workspace (zone,
read generation, poll interval), whether the instanceId / workflowId filters belong to it, and the
coverage of the scope (docs/reading-rules.md, with service/store/reads/coverage.py's SQL for it).

One round trip instead of four on the hot path of get_many_executions; for a pending caller
(the transport left the approval to the tool: `Tool.authorizes`) the same statement also
reads the approval, one round trip instead of two. Checks stay in the order of docs/tools.md,
Errors: the caller reads `read_generation` (cursor staleness) before calling `check_filters`
(NOT_FOUND for a filter outside the workspace).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import asyncpg

from service.auth.bearer import approval_query
from service.errors import NotFound
from service.store.plans import as_function
from service.store.reads.coverage import FIRST_OBSERVED_SQL, INSTANCE_SIDE_SQL
from service.tools.base import ToolContext
from service.tools.coverage import Coverage, coverage_of


def _scope_sql(extra_condition: str = "") -> str:
    return f"""
SELECT w.time_zone, w.read_generation, w.execution_poll_interval_seconds,
       (SELECT true FROM instances WHERE id = $2 AND workspace_id = $1) AS instance_found,
       (SELECT instance_id FROM workflows WHERE id = $3 AND workspace_id = $1) AS workflow_instance,
       s.last_sync, s.executions_truncated, s.workflows_truncated,
       ({FIRST_OBSERVED_SQL["executions"]}) AS first_observed
  FROM workspaces w, LATERAL ({INSTANCE_SIDE_SQL}) s
 WHERE w.id = $1{extra_condition}
"""


_SCOPE = _scope_sql()
# For a pending caller (`Tool.authorizes`): its approval ($4) and, only when that approval
# lists the workspace, the scope: no approval row → no row at all; a workspace not listed →
# the approval's columns with a null scope.
_AUTHORIZING_SCOPE = f"""
SELECT a.*, sc.*
  FROM ({approval_query("$4")}) a
  LEFT JOIN LATERAL ({_scope_sql(" AND $1 = ANY(a.workspace_ids)")}) sc ON true
"""


@dataclass(frozen=True)
class ExecutionScope:
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
            row = await conn.fetchrow(_SCOPE, workspace_id, instance_id, workflow_id)
    else:
        row = await conn.fetchrow(
            _AUTHORIZING_SCOPE, workspace_id, instance_id, workflow_id, ctx.caller.approval_id
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


# The first statement of a page whose rows do not depend on the scope, one per page
# statement text (a filter combination): built on first use from the column types
# PostgreSQL reports for both halves, so that neither half's columns are written twice.
_COMBINED: dict[str, str] = {}
FIRST_PAGE_PARAMETER = 5  # $1–$4: workspace, instance, workflow, approval


async def read_scope_and_page(
    ctx: ToolContext,
    conn: asyncpg.Connection,
    workspace_id: UUID,
    instance_id: UUID | None,
    workflow_id: UUID | None,
    page_sql: str,
    page_arguments: Sequence[Any],
    page_probe: Callable[[], str],
) -> tuple[ExecutionScope, list[asyncpg.Record]]:
    """`read_scope(..., not_found_later=True)` for a pending caller and the rows of
    `page_sql` (its parameters numbered from FIRST_PAGE_PARAMETER, $1 the workspace) in
    ONE statement: the approval and scope row first (`head`), then the page's rows in the
    page's order. The rows are read only for a workspace the approval lists, and returned
    only once `ToolContext.authorize` confirmed the caller; NOT_FOUND is left to the
    caller (`ExecutionScope.require_granted`), as with `not_found_later`. `page_probe`
    makes a statement with the page's columns and parameters numbered from $2 (PostgreSQL
    must type every parameter of a statement it describes); it is called only the first
    time a page statement is seen."""
    if ctx.caller.confirmed:
        raise RuntimeError("read_scope_and_page is for a pending caller")
    sql = _COMBINED.get(page_sql) or await _combined_sql(conn, page_sql, page_probe())
    rows = await conn.fetch(
        sql, workspace_id, instance_id, workflow_id, ctx.caller.approval_id, *page_arguments
    )
    head = next((row for row in rows if row["head"]), None)
    scope = _confirmed_scope(ctx, workspace_id, head, not_found_later=True)
    if not scope.granted:
        return scope, []
    page = [row for row in rows if not row["head"]]
    # UNION ALL keeps each half's order in practice but SQL does not promise it, and an
    # outer ORDER BY made PostgreSQL plan the statement anew on every call (its generic
    # plan cannot know the LIMIT): sorting the ≤ 51 rows here costs a pass when in order.
    page.sort(key=_page_order, reverse=True)
    return scope, page


def _page_order(row: asyncpg.Record) -> tuple[Any, Any]:
    return row["sort_at"], row["id"]


async def _combined_sql(conn: asyncpg.Connection, page_sql: str, page_probe: str) -> str:
    head_columns = (await conn.prepare(_AUTHORIZING_SCOPE)).get_attributes()
    page_columns = (await conn.prepare(page_probe)).get_attributes()

    def nulls(columns: Sequence[Any]) -> str:
        return ", ".join(f'NULL::{c.type.name} AS "{c.name}"' for c in columns)

    sql = f"""
WITH a AS ({approval_query("$4")})
SELECT true AS head, a.*, sc.*, {nulls(page_columns)}
  FROM a LEFT JOIN LATERAL ({_scope_sql(" AND $1 = ANY(a.workspace_ids)")}) sc ON true
UNION ALL
SELECT false, {nulls(head_columns)}, p.*
  FROM ({page_sql}) p
 WHERE EXISTS (SELECT 1 FROM a WHERE $1 = ANY(a.workspace_ids))
"""
    if getattr(conn, "through_pooler", False):  # planned once per backend, not every call
        sql = await as_function(conn, sql) or sql
    _COMBINED[page_sql] = sql
    return sql


_UNGRANTED = ExecutionScope(
    time_zone="UTC",
    read_generation=0,
    poll_interval_seconds=0,
    coverage=coverage_of(None, None, False, False),
    instance_found=False,
    workflow_instance=None,
    granted=False,
)
