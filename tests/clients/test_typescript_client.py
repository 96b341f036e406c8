"""The official TypeScript client (@modelcontextprotocol/sdk, StreamableHTTPClientTransport with
the bearer header in requestInit) against the running `elova-mcp serve`: it initializes a
session, lists the tools and calls every one; pytest validates what it printed."""

from __future__ import annotations

import asyncio
import json

from tests.clients.checks import (
    check_listing,
    check_not_found,
    check_result,
    plan,
    slow_workspaces_until_waiting,
)
from tests.clients.conftest import IssueToken
from tests.clients.dataset import Dataset
from tests.clients.node import TS_DIR, run
from tests.support.server import ServeProcesses
from tests.support.services import TestDatabase


async def test_typescript_client_lists_and_calls_every_tool(
    node_env: dict[str, str], elova: ServeProcesses, dataset: Dataset, issue_token: IssueToken
) -> None:
    calls = plan(dataset)
    refused = [
        ("get_workspace", {"workspaceId": dataset.foreign_workspace_id}),
        ("get_many_workspaces", {"limit": 0}),
    ]
    done = await run(
        ["node", str(TS_DIR / "call_tools.mjs"), elova.mcp_url],
        {**node_env, "ELOVA_TOKEN": await issue_token()},
        stdin=json.dumps({"calls": calls, "refused": refused}).encode(),
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.stdout)

    assert out["protocolVersion"] == "2025-11-25"
    assert out["sessionId"], "a session-era client gets a session id"
    assert set(out["serverCapabilities"]) == {"tools", "resources", "extensions"}
    check_listing(out["tools"])
    assert [r["tool"] for r in out["results"]] == [tool for tool, _ in calls]
    for item in out["results"]:
        check_result(item["tool"], item["result"], dataset)
    check_not_found(out["refused"][0]["result"])
    invalid = out["refused"][1]["result"]
    assert invalid["isError"] is True
    assert invalid["content"][0]["text"].startswith("VALIDATION_ERROR: ")
    assert invalid["_meta"]["code"] == "VALIDATION_ERROR"


async def test_typescript_client_parallel_calls_on_one_approval_are_all_answered(
    node_env: dict[str, str],
    elova: ServeProcesses,
    dataset: Dataset,
    issue_token: IssueToken,
    test_database: TestDatabase,
) -> None:
    """4 calls at once through the TypeScript SDK (it does not retry a 429) on one approval
    whose account may hold 2: all 4 answered (issue 39's wait for a slot)."""
    slow = asyncio.create_task(slow_workspaces_until_waiting(test_database.dsn, blocked=2))
    done = await run(
        ["node", str(TS_DIR / "call_tools.mjs"), elova.mcp_url],
        {**node_env, "ELOVA_TOKEN": await issue_token()},
        stdin=json.dumps({"calls": [], "parallel": [["get_many_workspaces", {}]] * 4}).encode(),
    )
    await slow
    assert done.returncode == 0, done.describe()
    out = json.loads(done.stdout)
    assert len(out["parallel"]) == 4
    for item in out["parallel"]:
        check_result(item["tool"], item["result"], dataset)
