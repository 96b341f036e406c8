"""What the tools read of workspaces: a page of the eligible ones by name (code point),
then id; one workspace; a list cursor's anchor name; a workspace's read generation."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

_PAGE = """
    SELECT id, name, time_zone FROM workspaces
     WHERE id = ANY($1::uuid[])
       AND ($2::text IS NULL OR (name, id) > ($2::text COLLATE "C", $3::uuid))
     ORDER BY name, id
     LIMIT {rows}
"""
_ONE = "SELECT id, name, time_zone FROM workspaces WHERE id = $1"
_ELIGIBLE_NAME = "SELECT name FROM workspaces WHERE id = $1 AND id = ANY($2::uuid[])"
_READ_GENERATION = "SELECT read_generation FROM workspaces WHERE id = $1"


async def workspace_page(
    conn: asyncpg.Connection,
    eligible: Sequence[UUID],
    after: tuple[str, UUID] | None,
    rows: int,
) -> list[asyncpg.Record]:
    """Up to `rows` eligible workspaces after the (name, id) keyset position `after`."""
    after_name, after_id = (None, None) if after is None else after
    # The row count is part of the text: with `LIMIT $n` PostgreSQL cannot cost a generic
    # plan and plans every call anew.
    found: list[asyncpg.Record] = await conn.fetch(
        _PAGE.format(rows=int(rows)), eligible, after_name, after_id
    )
    return found


async def workspace(
    conn: asyncpg.Connection | asyncpg.Pool, workspace_id: UUID
) -> asyncpg.Record | None:
    row: asyncpg.Record | None = await conn.fetchrow(_ONE, workspace_id)
    return row


async def eligible_workspace_name(
    conn: asyncpg.Connection, workspace_id: UUID, eligible: Sequence[UUID]
) -> str | None:
    """The name of `workspace_id` if it is one of `eligible`, else None."""
    name: str | None = await conn.fetchval(_ELIGIBLE_NAME, workspace_id, eligible)
    return name


async def read_generation(conn: asyncpg.Connection, workspace_id: UUID) -> int | None:
    generation = await conn.fetchval(_READ_GENERATION, workspace_id)
    return None if generation is None else int(generation)
