"""Prompt-injection hygiene: customer-controlled text (workspace, instance, workflow and node
names, execution error messages — here all carrying "Ignore previous instructions …") is
returned only as data inside structured fields, never merged into the tool catalog, the
server instructions, `server/discover`, `initialize`, result `_meta` or error text.
"""

from __future__ import annotations

import json
from typing import Any

from tests.hostile.conftest import Hostile
from tests.hostile.wire import Reply
from tests.hostile.world import INJECTION

CUSTOMER_MARKERS = (INJECTION, "TENANT-A-SECRET", "TENANT-B-SECRET")
NAME_FIELDS = {"name", "message", "workflowName", "instanceName", "workspaceName"}


def assert_no_customer_text(text: str, where: str) -> None:
    for marker in CUSTOMER_MARKERS:
        assert marker not in text, f"customer text reached {where}"


def strings_with_paths(value: Any, path: str = "$") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in strings_with_paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in strings_with_paths(v, f"{path}[{i}]")]
    return [(path, value)] if isinstance(value, str) else []


def check_result_hygiene(reply: Reply) -> list[str]:
    """Customer text only inside structuredContent (and its verbatim JSON copy in the text
    block); returns the structured paths where it appears."""
    result = reply.result
    assert result["isError"] is False, reply.body[:300]
    structured = result["structuredContent"]
    assert json.loads(result["content"][0]["text"]) == structured
    assert len(result["content"]) == 1 and result["content"][0]["type"] == "text"
    outside = {k: v for k, v in result.items() if k not in ("structuredContent", "content")}
    assert_no_customer_text(json.dumps(outside), "the result outside structuredContent")
    return [p for p, s in strings_with_paths(structured) if INJECTION in s]


async def test_catalog_instructions_and_discovery_carry_no_customer_text(hostile: Hostile) -> None:
    world = hostile.world
    seen: dict[str, bytes] = {}
    for name, granted in world.approvals.items():
        for method in ("tools/list", "server/discover", "resources/list", "prompts/list"):
            reply = await hostile.mcp.method(granted.token, method)
            # 2026-07-28: prompts/* is an undeclared capability (-32601, 404); resources/list
            # lists the views' ui:// documents, the same for every approval.
            expected = 404 if method == "prompts/list" else 200
            assert reply.status == expected, reply.body[:300]
            assert_no_customer_text(reply.body.decode(), method)
            key = method
            if key in seen:
                assert reply.body == seen[key], f"{method} differs for approval {name}"
            seen[key] = reply.body
    body = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": INJECTION, "version": INJECTION}}}).encode()  # fmt: skip
    headers = {
        "Authorization": f"Bearer {world.approvals['a'].token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    reply = await hostile.mcp.post(body, headers)
    assert reply.status == 200
    # Not even the client's own clientInfo is reflected into instructions or serverInfo.
    assert_no_customer_text(reply.body.decode(), "initialize")


async def test_customer_text_is_returned_as_data_in_named_fields(hostile: Hostile) -> None:
    world = hostile.world
    a = world.approvals["a"]
    ws = str(a.workspaces[0])
    tenant = world.tenants["a"]
    paths: set[str] = set()
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_many_workspaces", {}),
        ("get_workspace", {"workspaceId": ws}),
        ("get_many_instances", {"workspaceId": ws}),
        ("get_many_workflows", {"workspaceId": ws}),
        ("get_workflow", {"workspaceId": ws, "workflowId": tenant.workflows[ws][0]["id"]}),
        ("get_many_executions", {"workspaceId": ws}),
    ]
    failed = next(e for e in tenant.executions[ws] if e["status"] == "error")
    calls.append(("get_execution", {"workspaceId": ws, "executionId": failed["id"]}))
    for tool, arguments in calls:
        reply = await hostile.mcp.call(a.token, tool, arguments)
        paths |= {_shape(p) for p in check_result_hygiene(reply)}
    # Every place customer text appeared is a name or an error message field.
    assert paths, "the world's injection bait should appear in the results"
    assert {p.rsplit(".", 1)[-1] for p in paths} <= NAME_FIELDS, paths
    assert any(p.endswith("message") for p in paths), "execution error text was not returned"


def _shape(path: str) -> str:
    """`$.workspaces[3].name` → `$.workspaces[].name`."""
    out, skipping = [], False
    for ch in path:
        if ch == "[":
            skipping = True
            out.append("[]")
        elif ch == "]":
            skipping = False
        elif not skipping:
            out.append(ch)
    return "".join(out)


async def test_tool_errors_never_echo_stored_customer_text(hostile: Hostile) -> None:
    world = hostile.world
    a, b = world.approvals["a"], world.approvals["b"]
    foreign = str(b.workspaces[0])
    probes: list[tuple[str, dict[str, Any]]] = [
        ("get_workspace", {"workspaceId": foreign}),
        ("get_many_workflows", {"workspaceId": foreign}),
        ("get_execution_stats",
         {"workspaceId": foreign, "period": "all", "timeZone": INJECTION[:90]}),
        ("get_execution_stats", {"workspaceId": str(a.workspaces[0]), "period": "all",
                                 "timeZone": "Ignore/Previous"}),
    ]  # fmt: skip
    for tool, arguments in probes:
        reply = await hostile.mcp.call(a.token, tool, arguments)
        assert reply.is_tool_error, reply.body[:300]
        for marker in ("TENANT-A-SECRET", "TENANT-B-SECRET"):
            assert marker not in reply.body.decode()
