"""The approval state every MCP request is authorized by (migration 0021's `approval_state`).

`APPROVAL_STATE` reads it on its own; the execution tools' first statements read the same
function beside their rows (service/store/reads/executions.py). A row has the columns
`account_id, client_id, generation, scopes, revoked, expired, workspace_ids, roles`; no row
means the approval no longer exists.
"""

from __future__ import annotations

from uuid import UUID

import asyncpg

APPROVAL_STATE = "SELECT * FROM approval_state($1)"


async def read_approval_state(pool: asyncpg.Pool, approval_id: UUID) -> asyncpg.Record | None:
    return await pool.fetchrow(APPROVAL_STATE, approval_id)
