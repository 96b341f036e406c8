"""The two halves of coverage (docs/reading-rules.md) for workspace $1 and the optional
instance $2, as statements embed them: the instance side (one row: last sync, truncation
flags) and the earliest observedAt of the records a tool reads."""

from __future__ import annotations

from typing import Literal

Records = Literal["executions", "workflows"]

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
