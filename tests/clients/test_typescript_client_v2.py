"""The TypeScript client 2.x (@modelcontextprotocol/client, the SDK's split client package)
against the running `elova-mcp serve`, with the bearer header in requestInit: it lists the
tools and calls every one; pytest validates what it printed. The 1.x SDK is
test_typescript_client.py."""

from __future__ import annotations

import json

from tests.clients.checks import check_listing, check_not_found, check_result, plan
from tests.clients.conftest import IssueToken
from tests.clients.dataset import Dataset
from tests.clients.node import TS_DIR, run
from tests.support.server import ServeProcesses


async def test_typescript_client_2_lists_and_calls_every_tool(
    node_env: dict[str, str], elova: ServeProcesses, dataset: Dataset, issue_token: IssueToken
) -> None:
    calls = plan(dataset)
    refused = [("get_workspace", {"workspaceId": dataset.foreign_workspace_id})]
    done = await run(
        ["node", str(TS_DIR / "call_tools_v2.mjs"), elova.mcp_url],
        {**node_env, "ELOVA_TOKEN": await issue_token()},
        stdin=json.dumps({"calls": calls, "refused": refused}).encode(),
    )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.stdout)

    assert out["protocolVersion"], "the client negotiated a protocol revision"
    assert set(out["serverCapabilities"]) == {"tools", "resources", "extensions"}
    check_listing(out["tools"])
    assert {tool for tool, _ in calls} >= {t["name"] for t in out["tools"]}
    assert [r["tool"] for r in out["results"]] == [tool for tool, _ in calls]
    for item in out["results"]:
        check_result(item["tool"], item["result"], dataset)
    check_not_found(out["refused"][0]["result"])
