"""The MCP Inspector 2.x CLI (`inspector --cli`, the version docs/connecting.md tells people to
use; pinned as the npm alias `inspector2` beside 0.22, which test_inspector.py drives): with
the bearer in `--header`, straight to the service, it lists the tools and calls all nine."""

from __future__ import annotations

import json
from typing import Any

from tests.clients.checks import check_listing, check_result, plan
from tests.clients.conftest import IssueToken
from tests.clients.dataset import Dataset
from tests.clients.node import TS_DIR, run
from tests.support.server import ServeProcesses

LAUNCHER = TS_DIR / "node_modules" / "inspector2" / "clients" / "launcher" / "build" / "index.js"


async def inspector(url: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    done = await run(["node", str(LAUNCHER), "--cli", url, "--transport", "http", *args], env)
    assert done.returncode == 0, done.describe()
    out: dict[str, Any] = json.loads(done.stdout)
    return out


def _tool_args(arguments: dict[str, Any]) -> list[str]:
    pairs = [f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in arguments.items()]
    return ["--tool-arg", *pairs] if pairs else []


async def test_inspector_2_cli_lists_and_calls_every_tool(
    node_env: dict[str, str], elova: ServeProcesses, dataset: Dataset, issue_token: IssueToken
) -> None:
    header = f"Authorization: Bearer {await issue_token()}"
    listed = await inspector(elova.mcp_url, node_env, "--header", header, "--method", "tools/list")
    check_listing(listed["tools"])
    calls = plan(dataset)
    assert {tool for tool, _ in calls} == {t["name"] for t in listed["tools"]}
    for tool, arguments in calls:
        called = await inspector(
            elova.mcp_url, node_env, "--header", header,
            "--method", "tools/call", "--tool-name", tool, *_tool_args(arguments),
        )  # fmt: skip
        check_result(tool, called, dataset)
