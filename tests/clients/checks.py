"""What every client test checks the same way: the published catalog, the tool calls to make
against the dataset, and the validation of each result (structuredContent against the
tool's outputSchema under JSON Schema 2020-12, the text block equal to the structured JSON,
and the values the dataset says it must hold)."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import asyncpg
from jsonschema import Draft202012Validator

from tests.clients.dataset import Dataset

# The product contract as `tools/list` serves it (docs/tools.md).
CATALOG_PATH = Path(__file__).resolve().parents[2] / "service" / "contract" / "elova-tools.json"
TOOL_FIELDS = ("name", "description", "inputSchema", "outputSchema", "annotations")
# The revision the official Python client settles on in each of its connect modes.
EXPECTED_VERSION = {"auto": "2026-07-28", "legacy": "2025-11-25"}


def wire(model: Any) -> dict[str, Any]:
    """A Python-client result as it was on the wire (camelCase names, absent fields left out)."""
    out: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_unset=True)
    return out


@cache
def catalog() -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = json.loads(CATALOG_PATH.read_text("utf-8"))["tools"]
    return tools


@cache
def _validator(tool: str) -> Draft202012Validator:
    schema = next(t["outputSchema"] for t in catalog() if t["name"] == tool)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def validate_output(tool: str, structured: Any) -> None:
    errors = sorted(_validator(tool).iter_errors(structured), key=str)
    assert not errors, f"{tool} output does not match its outputSchema: {errors[0]}"


def check_listing(listed: list[dict[str, Any]]) -> None:
    """tools/list as a client received it: exactly the nine tools, fields equal to the spec."""
    assert [t["name"] for t in listed] == [t["name"] for t in catalog()]
    for got, want in zip(listed, catalog(), strict=True):
        for name in TOOL_FIELDS:
            assert got.get(name) == want[name], f"{want['name']}.{name} differs from the catalog"
        # What clients show instead of the name: a human-readable title ("List executions").
        title = got.get("title")
        assert isinstance(title, str) and title[:1].isupper() and "_" not in title, got["name"]


def plan(data: Dataset) -> list[tuple[str, dict[str, Any]]]:
    """One call of every tool, in catalog order, with arguments naming real records."""
    ws = data.workspace_id
    return [
        ("get_many_workspaces", {"limit": 50}),
        ("get_workspace", {"workspaceId": ws}),
        ("get_many_instances", {"workspaceId": ws}),
        ("get_execution_stats", {"workspaceId": ws, "period": "all", "timeZone": "Asia/Kathmandu"}),
        ("get_many_sync_jobs", {"workspaceId": ws, "instanceId": data.instance_id}),
        ("get_many_executions", {"workspaceId": ws, "limit": 10}),
        ("get_execution", {"workspaceId": ws, "executionId": data.execution_id}),
        ("get_many_workflows", {"workspaceId": ws, "lifecycle": "all"}),
        ("get_workflow", {"workspaceId": ws, "workflowId": data.workflow_id}),
    ]


def check_result(tool: str, result: dict[str, Any], data: Dataset) -> dict[str, Any]:
    """A successful tools/call result in wire form (isError, content, structuredContent)."""
    assert result.get("isError") in (None, False), f"{tool} failed: {result.get('content')}"
    structured = result["structuredContent"]
    validate_output(tool, structured)
    texts = [c for c in result["content"] if c.get("type") == "text"]
    assert len(texts) == 1, f"{tool}: expected one text block, got {result['content']}"
    assert json.loads(texts[0]["text"]) == structured, f"{tool}: text differs from structured"
    _check_values(tool, structured, data)
    return dict(structured)


def _check_values(tool: str, out: dict[str, Any], data: Dataset) -> None:
    if tool == "get_many_workspaces":
        assert {w["id"] for w in out["workspaces"]} == set(data.granted)
        assert [w["name"] for w in out["workspaces"]][1] == data.workspace_name
    elif tool == "get_workspace":
        assert out["workspace"]["id"] == data.workspace_id
        assert out["workspace"]["name"] == data.workspace_name
        assert out["workspace"]["timeZone"] == "Asia/Kathmandu"
    elif tool == "get_many_instances":
        assert data.instance_id in {i["id"] for i in out["instances"]}
        assert len(out["instances"]) == 2
    elif tool == "get_execution_stats":
        totals = out["totals"]
        counts = (totals["executions"], totals["success"], totals["failed"], totals["other"])
        assert counts == (4, 1, 2, 1)
        assert totals["undatedExecutions"] == 1
        assert Decimal(out["cost"]["amount"]) == Decimal("0.5125")
        assert out["asOf"].endswith("+05:45")
    elif tool == "get_many_sync_jobs":
        assert [j["status"] for j in out["jobs"]] == ["failed", "succeeded"]
    elif tool == "get_many_executions":
        assert len(out["executions"]) == 4 and out["nextCursor"] is None
    elif tool == "get_execution":
        assert out["execution"]["id"] == data.execution_id
        assert out["execution"]["cost"]["amount"] == "0.0125"
    elif tool == "get_many_workflows":
        assert data.workflow_id in {w["id"] for w in out["workflows"]}
        assert len(out["workflows"]) == 2
    elif tool == "get_workflow":
        assert out["workflow"]["id"] == data.workflow_id
        assert out["workflow"]["name"] == "Orders \u2192 CRM \U0001d11e"


def check_not_found(result: dict[str, Any]) -> None:
    """A workspace not granted to the approval: a tool error, indistinguishable from absent."""
    assert result.get("isError") is True
    assert result["content"][0]["text"].startswith("NOT_FOUND: ")
    assert result.get("structuredContent") is None
    assert result["_meta"]["code"] == "NOT_FOUND" and result["_meta"]["retryable"] is False


async def slow_workspaces_until_waiting(dsn: str, *, blocked: int, then: float = 0.3) -> None:
    """Make `get_many_workspaces` slow: lock the `workspaces` table until `blocked` calls
    wait inside PostgreSQL (the account cap's worth), `then` seconds more (the client's
    other calls arrive and wait for a slot), then let them all through."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE")
            watcher = await asyncpg.connect(dsn)
            try:
                for _ in range(500):
                    waiting = await watcher.fetchval(
                        "SELECT count(*) FROM pg_stat_activity"
                        " WHERE datname = current_database() AND wait_event_type = 'Lock'"
                    )
                    if waiting >= blocked:
                        break
                    await asyncio.sleep(0.01)
            finally:
                await watcher.close()
            await asyncio.sleep(then)
    finally:
        await conn.close()
