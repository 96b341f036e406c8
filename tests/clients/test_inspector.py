"""The MCP Inspector CLI (@modelcontextprotocol/inspector, `--cli` mode): the tool
docs/connecting.md tells operators to try. Once as documented (the bearer in `--header`,
straight to the service) and once through the bearer test proxy, as a gateway would."""

from __future__ import annotations

import json
from typing import Any

from tests.clients.checks import check_listing, check_result
from tests.clients.conftest import IssueToken
from tests.clients.dataset import Dataset
from tests.clients.node import BIN, run
from tests.clients.proxy import BearerProxy
from tests.support.server import ServeProcesses


async def inspector(url: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = await run([str(BIN / "mcp-inspector"), "--cli", url, "--transport", "http", *args], env)
    assert done.returncode == 0, done.describe()
    out: dict[str, Any] = json.loads(done.stdout)
    return out


async def test_inspector_cli_as_documented_lists_the_tools(
    node_env: dict[str, str], elova: ServeProcesses, issue_token: IssueToken
) -> None:
    header = f"Authorization: Bearer {await issue_token()}"
    listed = await inspector(elova.mcp_url, node_env, "--header", header, "--method", "tools/list")
    check_listing(listed["tools"])


async def test_inspector_cli_through_the_proxy_lists_and_calls(
    node_env: dict[str, str], proxy: BearerProxy, dataset: Dataset
) -> None:
    listed = await inspector(proxy.url, node_env, "--method", "tools/list")
    check_listing(listed["tools"])
    called = await inspector(
        proxy.url, node_env,
        "--method", "tools/call", "--tool-name", "get_workspace",
        "--tool-arg", f"workspaceId={dataset.workspace_id}",
    )  # fmt: skip
    check_result("get_workspace", called, dataset)
