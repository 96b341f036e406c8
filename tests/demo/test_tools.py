"""The loaded demo read through the nine tools of the real app, as the demo account: every
answer validates against the catalog's output schema, so every string the demo holds is
within bounds after the service's shaping and every enum is valid."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import DB_POOL, TOKENS
from service.cli.approve import approve
from service.config import Config
from service.demo.document import DEMO_EMAIL, demo_workspace_ids
from tests.support.mcp_wire import tool_call

CATALOG = Path(__file__).parents[2] / "service" / "contract" / "elova-tools.json"
ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


class DemoClient:
    """Calls tools over /mcp (2026-07-28) and validates each result against its schema."""

    def __init__(self, client: TestClient[web.Request, web.Application], token: str) -> None:
        self.client = client
        self.token = token
        tools = json.loads(CATALOG.read_text("utf-8"))["tools"]
        self.validators = {
            t["name"]: jsonschema.Draft202012Validator(t["outputSchema"]) for t in tools
        }
        self.calls = 0

    async def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        body, headers = tool_call(tool, arguments, token=self.token, request_id=self.calls)
        self.calls += 1
        resp = await self.client.post("/mcp", data=msgspec.json.encode(body), headers=headers)
        assert resp.status == 200, await resp.text()
        result = (await resp.json())["result"]
        assert result["isError"] is False, (tool, arguments, result["content"][0]["text"])
        structured: dict[str, Any] = result["structuredContent"]
        self.validators[tool].validate(structured)
        return structured

    async def pages(self, tool: str, key: str, **arguments: Any) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            extra: dict[str, Any] = {"cursor": cursor} if cursor else {}
            page = await self.call(tool, **arguments, **extra)
            rows += page[key]
            cursor = page["nextCursor"]
            if cursor is None:
                return rows


@pytest.fixture
async def demo(
    demo_loaded: dict[str, Any], aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> DemoClient:
    cfg = make_config(LIMIT_APPROVAL_PER_MINUTE="1000000")
    client = await aiohttp_client(create_app(cfg))
    app = client.app
    issued = await approve(
        app[DB_POOL],
        cfg,
        account=DEMO_EMAIL,
        workspaces=demo_workspace_ids(),
        client_name="demo tool walk",
        tokens=app[TOKENS],
    )
    return DemoClient(client, issued.access_token)


async def test_workspaces_instances_jobs_and_stats(demo: DemoClient) -> None:
    listed = (await demo.call("get_many_workspaces"))["workspaces"]
    assert sorted(w["id"] for w in listed) == sorted(demo_workspace_ids())
    assert "Globex Finance" not in {w["name"] for w in listed}
    assert max(len(w["name"]) for w in listed) == 200  # the long name, shortened
    truncated_jobs = False
    for ws in listed:
        await demo.call("get_workspace", workspaceId=ws["id"])
        instances = (await demo.call("get_many_instances", workspaceId=ws["id"]))["instances"]
        for inst in instances:
            jobs = await demo.call(
                "get_many_sync_jobs", workspaceId=ws["id"], instanceId=inst["id"]
            )
            truncated_jobs |= jobs["truncated"]
        for period in ("today", "7d", "30d", "all"):
            stats = await demo.call(
                "get_execution_stats", workspaceId=ws["id"], period=period, timeZone=ws["timeZone"]
            )
            buckets = stats["buckets"]
            assert len(buckets) <= 30
        assert stats["totals"]["executions"] > 0 or not instances
    assert truncated_jobs  # the 140-job instance shows `truncated`


async def test_every_workflow_and_its_inventory(demo: DemoClient) -> None:
    seen = 0
    truncated = 0
    for ws_id in demo_workspace_ids():
        rows = await demo.pages(
            "get_many_workflows", "workflows", workspaceId=ws_id, lifecycle="all"
        )
        for row in rows:
            workflow = (await demo.call("get_workflow", workspaceId=ws_id, workflowId=row["id"]))[
                "workflow"
            ]
            truncated += workflow["nodesTruncated"]
            seen += 1
    assert seen > 20
    assert truncated == 1  # the 1000-node workflow


# 239 calls, each page checked against its schema: 2 s here, 4 s under coverage; a CI run
# on a loaded machine took over 30 s (about 120 ms a call), so the hang guard is wider.
@pytest.mark.timeout(120)
async def test_every_execution_page_and_each_kind_of_row(
    demo: DemoClient, demo_loaded: dict[str, Any]
) -> None:
    listed = 0
    for ws_id in demo_workspace_ids():
        listed += len(await demo.pages("get_many_executions", "executions", workspaceId=ws_id))
    visible = {
        i["id"] for i in demo_loaded["instances"] if i["workspaceId"] in demo_workspace_ids()
    }
    rows = [e for e in demo_loaded["executions"] if e["instanceId"] in visible]
    assert listed == len(rows)
    workspace_of = {i["id"]: i["workspaceId"] for i in demo_loaded["instances"]}
    # Every row was validated in the pages above; read some of each awkward kind one by one
    # (every history report was checked against its schema in test_snapshot.py).
    picked: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        picked.setdefault(_kind(row), []).append(row)
    partial = 0
    for kind, members in picked.items():
        for row in members[:: max(len(members) // 12, 1)]:
            got = await demo.call(
                "get_execution", workspaceId=workspace_of[row["instanceId"]], executionId=row["id"]
            )
            assert ("history" in got) == ("history" in row), kind
            partial += got.get("history", {}).get("availability") == "partial"
    assert {"orphan", "undated", "available", "unavailable", "expired"} <= set(picked)
    assert partial > 0


def _kind(row: dict[str, Any]) -> str:
    if row["workflowId"] is None:
        return "orphan"
    if row["startedAt"] is None and row["createdAt"] is None:
        return "undated"
    if "history" in row:
        history = row["history"]
        runs = max((len(n["runs"]) for n in history["nodes"]), default=0)
        big = len(history["nodes"]) > 64 or runs > 128
        return "partial" if big else str(history["availability"])
    return "cost" if row.get("cost") else "plain"
