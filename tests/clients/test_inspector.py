"""The MCP Inspector CLI (@modelcontextprotocol/inspector, `--cli` mode) through the bearer
test proxy: the tool an operator is told to try first (README) lists the nine tools and
calls one with an argument."""

from __future__ import annotations

import json
from typing import Any

from tests.clients.checks import check_listing, check_result
from tests.clients.dataset import Dataset
from tests.clients.node import BIN, run
from tests.clients.proxy import BearerProxy


async def inspector(proxy: BearerProxy, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = await run(
        [str(BIN / "mcp-inspector"), "--cli", proxy.url, "--transport", "http", *args], env
    )
    assert done.returncode == 0, done.describe()
    out: dict[str, Any] = json.loads(done.stdout)
    return out


async def test_inspector_cli_lists_tools_and_calls_one(
    node_env: dict[str, str], proxy: BearerProxy, dataset: Dataset
) -> None:
    listed = await inspector(proxy, node_env, "--method", "tools/list")
    check_listing(listed["tools"])

    called = await inspector(
        proxy, node_env,
        "--method", "tools/call", "--tool-name", "get_workspace",
        "--tool-arg", f"workspaceId={dataset.workspace_id}",
    )  # fmt: skip
    check_result("get_workspace", called, dataset)
