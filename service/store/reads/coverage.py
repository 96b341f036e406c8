"""What coverage (docs/reading-rules.md) reads of a scope: the instance side (latest sync,
whether history or the workflow inventory is truncated) and the earliest `observedAt` of
the records a tool reads. Scope is workspace $1 and the optional instance $2.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

import asyncpg

Records = Literal["executions", "workflows"]

# As SQL other statements embed (the execution tools' scope statement reads them with the
# workspace in one round trip): the instance side (one row) and the earliest observedAt.
INSTANCE_SIDE_SQL = """
    SELECT max(last_sync_at) AS last_sync,
           coalesce(bool_or(NOT history_complete), false) AS executions_truncated,
           coalesce(bool_or(workflow_inventory_truncated), false) AS workflows_truncated
      FROM instances
     WHERE workspace_id = $1 AND ($2::uuid IS NULL OR id = $2)
"""
FIRST_OBSERVED_SQL: dict[Records, str] = {
    "executions": """
        SELECT min(observed_at) FROM executions
         WHERE workspace_id = $1 AND ($2::uuid IS NULL OR instance_id = $2)""",
    "workflows": """
        SELECT min(observed_at) FROM workflows
         WHERE workspace_id = $1 AND ($2::uuid IS NULL OR instance_id = $2)""",
}

# first observedAt, last successful sync, executions truncated, workflows truncated
CoverageFacts = tuple[datetime | None, datetime | None, bool, bool]


async def read_coverage(
    conn: asyncpg.Connection | asyncpg.Pool,
    workspace_id: UUID,
    instance_id: UUID | None,
    records: Records,
) -> CoverageFacts:
    side = await conn.fetchrow(INSTANCE_SIDE_SQL, workspace_id, instance_id)
    first = await conn.fetchval(FIRST_OBSERVED_SQL[records], workspace_id, instance_id)
    assert side is not None
    return first, side["last_sync"], side["executions_truncated"], side["workflows_truncated"]
