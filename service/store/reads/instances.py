"""What the tools read of instances: the first of a workspace by name (code point), then id,
each with how many current workflows it holds; which workspace an instance belongs to."""

from __future__ import annotations

from uuid import UUID

import asyncpg

MAX_INSTANCES = 20

_FIRST = f"""
    SELECT i.*,
           (SELECT count(*) FROM workflows w
             WHERE w.instance_id = i.id AND w.is_current) AS workflow_count
      FROM instances i
     WHERE i.workspace_id = $1
     ORDER BY i.name, i.id
     LIMIT {MAX_INSTANCES}
"""
_WORKSPACE = "SELECT workspace_id FROM instances WHERE id = $1"


async def first_instances(
    conn: asyncpg.Connection | asyncpg.Pool, workspace_id: UUID
) -> list[asyncpg.Record]:
    """The first MAX_INSTANCES instances of the workspace, with `workflow_count`."""
    found: list[asyncpg.Record] = await conn.fetch(_FIRST, workspace_id)
    return found


async def instance_workspace(conn: asyncpg.Connection, instance_id: UUID) -> UUID | None:
    """The workspace the instance belongs to; None when there is no such instance."""
    owner: UUID | None = await conn.fetchval(_WORKSPACE, instance_id)
    return owner
