"""What the tools read of workflows: a page of a workspace's workflows by name (code point),
then id, in one lifecycle; one workflow with its stored node inventory; a list cursor's
anchor name. Rows carry their instance's name and the costMedian inputs of
workflow_execution_summaries (kept by the executions loader).

Lifecycle (docs/reading-rules.md): `current` rows are present, not archived and not
definition-less; the rest are `historical`.
"""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

import asyncpg

Lifecycle = Literal["current", "historical", "all"]

_SELECT = """
    SELECT w.id, w.instance_id, i.name AS instance_name, w.name, w.source_id, w.active,
           w.tracked, w.present, w.archived_known, w.archived, w.definition_available,
           w.definition_removed_known, w.definition_removed_at, w.updated_at, w.node_count,
           w.observed_at, s.total_executions, s.priced_executions, s.median_amount,
           s.cost_partial, s.missing_mapping_observations{extra}
      FROM workflows w
      JOIN instances i ON i.id = w.instance_id
      LEFT JOIN workflow_execution_summaries s ON s.workflow_id = w.id
"""
_LIFECYCLE = {"current": "w.is_current", "historical": "NOT w.is_current", "all": None}
_ONE = (
    _SELECT.format(extra=", w.nodes_inventory, w.nodes_truncated")
    + " WHERE w.id = $1 AND w.workspace_id = $2"
)
_NAME = "SELECT name FROM workflows WHERE id = $1 AND workspace_id = $2"


def page_query(
    workspace_id: UUID,
    instance_id: UUID | None,
    lifecycle: Lifecycle,
    after: tuple[str, UUID] | None,
    fetch: int,
) -> tuple[str, list[Any]]:
    """One of a fixed set of statements (argument text never enters the SQL), with its
    arguments; each shape has an index in (scope, [is_current,] name, id) order."""
    args: list[Any] = [workspace_id]
    where = ["w.workspace_id = $1"]
    if instance_id is not None:
        args.append(instance_id)
        where.append(f"w.instance_id = ${len(args)}")
    condition = _LIFECYCLE[lifecycle]
    if condition:
        where.append(condition)
    if after is not None:
        args.extend(after)
        where.append(f'(w.name, w.id) > (${len(args) - 1}::text COLLATE "C", ${len(args)}::uuid)')
    sql = f"{_SELECT.format(extra='')} WHERE {' AND '.join(where)} ORDER BY w.name, w.id"
    # The row count is part of the text: with `LIMIT $n` PostgreSQL cannot cost a generic
    # plan and plans every call anew.
    return f"{sql} LIMIT {int(fetch)}", args


async def workflow_page(
    conn: asyncpg.Connection,
    workspace_id: UUID,
    instance_id: UUID | None,
    lifecycle: Lifecycle,
    after: tuple[str, UUID] | None,
    fetch: int,
) -> list[asyncpg.Record]:
    """Up to `fetch` workflows after the (name, id) keyset position `after`."""
    query, args = page_query(workspace_id, instance_id, lifecycle, after, fetch)
    found: list[asyncpg.Record] = await conn.fetch(query, *args)
    return found


async def workflow(
    conn: asyncpg.Connection, workflow_id: UUID, workspace_id: UUID
) -> asyncpg.Record | None:
    """The workflow with `nodes_inventory` and `nodes_truncated`, if it is the workspace's."""
    row: asyncpg.Record | None = await conn.fetchrow(_ONE, workflow_id, workspace_id)
    return row


async def workflow_name(
    conn: asyncpg.Connection, workflow_id: UUID, workspace_id: UUID
) -> str | None:
    name: str | None = await conn.fetchval(_NAME, workflow_id, workspace_id)
    return name
