"""How the FastMCP peer shapes a row: as our tool does (service.tools.executions.shape_row),
the same fields in the same order, written as a user would without our packages (the peer's
venv has none of them). tests/bench/test_peers.py checks it against ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

WORKFLOW_NAME_LENGTH = 100
LABEL_LENGTH = 200


def _amount(value: Decimal) -> str:
    if value == 0:
        return "0"
    text = format(value, "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def shape(row: Mapping[str, Any]) -> dict[str, Any]:
    """A stored execution as our tool answers it (docs/tools.md: cost absent / null / set)."""
    name = row["workflow_name"]
    workflow_id = row["workflow_id"]
    out: dict[str, Any] = {
        "id": str(row["id"]),
        "instanceId": str(row["instance_id"]),
        "instanceName": row["instance_name"][:LABEL_LENGTH],
        "workflowId": None if workflow_id is None else str(workflow_id),
        "workflowName": name[:WORKFLOW_NAME_LENGTH],
        "workflowNameTruncated": len(name) > WORKFLOW_NAME_LENGTH,
        "sourceId": row["source_id"][:LABEL_LENGTH],
        "sourceWorkflowId": row["source_workflow_id"][:LABEL_LENGTH],
        "status": row["status"],
        "startedAt": row["started_at"],
        "createdAt": row["created_at"],
        "stoppedAt": row["stopped_at"],
        "durationMs": row["duration_ms"],
        "observedAt": row["observed_at"],
        "sourceMissing": row["source_missing"],
    }
    if row["cost_state"] == 1:
        out["cost"] = None
    elif row["cost_state"] == 2:
        out["cost"] = {
            "amount": _amount(row["cost_amount"]),
            "currency": "USD",
            "kind": "estimated",
            "basis": "openrouter",
        }
    if row["cc_state"] is not None:
        coverage = {
            "state": row["cc_state"],
            "pricedComponents": row["cc_priced"],
            "unresolvedComponents": row["cc_unresolved"],
            "excludedComponents": row["cc_excluded"],
            "observations": row["cc_observations"],
        }
        if row["cc_missing_mapping"] is not None:
            coverage["missingMappingObservations"] = row["cc_missing_mapping"]
        out["costCoverage"] = coverage
    return out
