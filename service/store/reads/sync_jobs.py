"""What the tools read of sync jobs: the newest jobs of an instance of a workspace,
createdAt descending, then id descending."""

from __future__ import annotations

from uuid import UUID

import asyncpg

_RECENT = """
    SELECT j.* FROM sync_jobs j
      JOIN instances i ON i.id = j.instance_id
     WHERE j.instance_id = $1 AND i.workspace_id = $2
     ORDER BY j.created_at DESC, j.id DESC
     LIMIT {rows}
"""


async def recent_jobs(
    conn: asyncpg.Connection, instance_id: UUID, workspace_id: UUID, rows: int
) -> list[asyncpg.Record]:
    """The newest `rows` jobs of the instance, if it belongs to the workspace."""
    found: list[asyncpg.Record] = await conn.fetch(
        _RECENT.format(rows=int(rows)), instance_id, workspace_id
    )
    return found
