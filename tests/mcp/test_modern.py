"""Revision 2026-07-28 on the wire: stateless requests, per-request _meta, mirrored headers,
discovery, caching hints and serverInfo on every result."""

from __future__ import annotations

import base64
import json
from importlib import resources
from typing import Any

import pytest

from tests.mcp.conftest import EXPECTED_SERVER_INFO, MODERN, Wire

SERVER_INFO = {"io.modelcontextprotocol/serverInfo": EXPECTED_SERVER_INFO}
# tools, and the MCP Apps views: their ui:// resources and the extension (docs/views.md).
CAPABILITIES = {
    "tools": {},
    "resources": {},
    "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}},
}
# The `_meta` of the tools a view renders; every other tool has none.
VIEW_META = {
    "get_execution_stats": {
        "ui": {"resourceUri": "ui://elova-mcp/execution-stats.html", "visibility": ["model"]}
    },
    "get_many_executions": {
        "ui": {"resourceUri": "ui://elova-mcp/executions.html", "visibility": ["model", "app"]}
    },
    "get_execution": {
        "ui": {"resourceUri": "ui://elova-mcp/execution.html", "visibility": ["model", "app"]}
    },
}


def catalog_tools() -> list[dict[str, Any]]:
    document = json.loads(
        resources.files("service.contract").joinpath("elova-tools.json").read_bytes()
    )
    keys = ("name", "description", "inputSchema", "outputSchema", "annotations")
    return [{k: tool[k] for k in keys} for tool in document["tools"]]


TITLES = {
    "get_many_workspaces": "List workspaces",
    "get_workspace": "Get workspace",
    "get_many_instances": "List n8n instances",
    "get_execution_stats": "Execution statistics",
    "get_many_sync_jobs": "List sync jobs",
    "get_many_executions": "List executions",
    "get_execution": "Get execution",
    "get_many_workflows": "List workflows",
    "get_workflow": "Get workflow",
}


async def test_discover_golden(wire: Wire) -> None:
    resp = await wire.modern("server/discover", request_id="discover-1")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    answer = await resp.json()
    result = answer.pop("result")
    assert answer == {"jsonrpc": "2.0", "id": "discover-1"}
    instructions = result.pop("instructions")
    assert "get_many_workspaces" in instructions
    assert result == {
        "resultType": "complete",
        "supportedVersions": [MODERN, "2025-11-25", "2025-06-18"],
        "capabilities": CAPABILITIES,
        "ttlMs": 300000,
        "cacheScope": "public",
        "_meta": SERVER_INFO,
    }


async def test_tools_list_is_exactly_the_catalog(wire: Wire) -> None:
    resp = await wire.modern("tools/list")
    result = (await resp.json())["result"]
    tools = result.pop("tools")
    # Each tool: a human-readable title beside the catalog's own members, which are unchanged.
    assert [t.pop("title") for t in tools] == [TITLES[t["name"]] for t in catalog_tools()]
    # The three tools a view renders name it in `_meta.ui` (MCP Apps); nothing else is added.
    metas = {t["name"]: t.pop("_meta") for t in tools if "_meta" in t}
    assert metas == VIEW_META
    assert tools == catalog_tools()
    assert result == {
        "resultType": "complete",
        "ttlMs": 300000,
        "cacheScope": "public",
        "_meta": SERVER_INFO,
    }


@pytest.mark.parametrize("method, key", [("prompts/list", "prompts")])
async def test_undeclared_capabilities_are_unknown_methods(
    wire: Wire, method: str, key: str
) -> None:
    """2026-07-28: server/discover declares tools and resources (the views), not prompts,
    so prompts/* are unknown methods (-32601, HTTP 404); the session revisions keep their
    empty list (test_sessions). Resources: tests/mcp/test_resources.py."""
    resp = await wire.modern(method)
    assert resp.status == 404
    error = (await resp.json())["error"]
    assert error["code"] == -32601
    assert method in error["message"]
    assert key


async def test_a_cursor_we_never_issued_is_invalid_params(wire: Wire) -> None:
    resp = await wire.modern("tools/list", {"cursor": "abc"})
    assert (await resp.json())["error"]["code"] == -32602


@pytest.mark.parametrize("method", ["ping", "initialize", "logging/setLevel", "nope/nothing"])
async def test_unknown_method_is_http_404(wire: Wire, method: str) -> None:
    resp = await wire.modern(method, request_id=9)
    assert resp.status == 404
    answer = await resp.json()
    assert answer["id"] == 9 and answer["error"]["code"] == -32601


async def test_notification_is_202_without_body(wire: Wire) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    resp = await wire.post(body, wire.modern_headers("notifications/cancelled"))
    assert resp.status == 202
    assert await resp.read() == b""


def _mismatch(answer: dict[str, Any]) -> str:
    assert answer["error"]["code"] == -32020, answer
    message: str = answer["error"]["message"]
    return message


@pytest.mark.parametrize("header", ["MCP-Protocol-Version", "Mcp-Method"])
async def test_missing_required_header(wire: Wire, header: str) -> None:
    headers = wire.modern_headers("tools/list")
    del headers[header]
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 400
    assert header in _mismatch(await resp.json())


async def test_method_header_differs_from_body(wire: Wire) -> None:
    resp = await wire.post(
        wire.modern_body("tools/call", {"name": "get_workspace"}),
        wire.modern_headers("tools/list", "get_workspace"),
    )
    assert resp.status == 400
    _mismatch(await resp.json())


async def test_method_header_values_are_case_sensitive(wire: Wire) -> None:
    resp = await wire.post(wire.modern_body("tools/list"), wire.modern_headers("Tools/List"))
    assert resp.status == 400
    _mismatch(await resp.json())


async def test_name_header_is_required_for_tools_call(wire: Wire) -> None:
    body = wire.modern_body("tools/call", {"name": "get_many_workspaces", "arguments": {}})
    resp = await wire.post(body, wire.modern_headers("tools/call"))
    assert resp.status == 400
    assert "Mcp-Name" in _mismatch(await resp.json())


async def test_name_header_differs_from_body(wire: Wire) -> None:
    body = wire.modern_body("tools/call", {"name": "get_many_workspaces", "arguments": {}})
    resp = await wire.post(body, wire.modern_headers("tools/call", "get_workspace"))
    assert resp.status == 400
    message = _mismatch(await resp.json())
    assert "get_workspace" in message and "get_many_workspaces" in message


async def test_base64_name_header_is_decoded_before_comparing(wire: Wire) -> None:
    encoded = "=?base64?" + base64.b64encode(b"get_many_workspaces").decode() + "?="
    body = wire.modern_body("tools/call", {"name": "get_many_workspaces", "arguments": {}})
    resp = await wire.post(body, wire.modern_headers("tools/call", encoded))
    assert resp.status == 200
    # A sentinel that decodes to another name, or does not decode, never matches.
    other = "=?base64?" + base64.b64encode(b"get_workspace").decode() + "?="
    assert (await wire.post(body, wire.modern_headers("tools/call", other))).status == 400
    assert (await wire.post(body, wire.modern_headers("tools/call", "=?base64?!!?="))).status == 400


async def test_non_ascii_tool_name_round_trips_through_base64(wire: Wire) -> None:
    name = "outil-été"
    encoded = "=?base64?" + base64.b64encode(name.encode()).decode() + "?="
    body = wire.modern_body("tools/call", {"name": name, "arguments": {}})
    resp = await wire.post(body, wire.modern_headers("tools/call", encoded))
    assert resp.status == 200  # headers agree; the tool itself is unknown
    assert (await resp.json())["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}


async def test_meta_version_differs_from_header(wire: Wire) -> None:
    body = wire.modern_body(
        "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}}
    )
    resp = await wire.post(body, wire.modern_headers("tools/list"))
    assert resp.status == 400
    _mismatch(await resp.json())


async def test_unsupported_version_names_the_supported_ones(wire: Wire) -> None:
    body = wire.modern_body(
        "server/discover", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}}
    )
    headers = wire.modern_headers("server/discover", **{"MCP-Protocol-Version": "2099-01-01"})
    resp = await wire.post(body, headers)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == -32022
    assert error["data"] == {
        "supported": [MODERN, "2025-11-25", "2025-06-18"],
        "requested": "2099-01-01",
    }


@pytest.mark.parametrize(
    "drop",
    ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"],
)
async def test_missing_required_meta_is_invalid_params_400(wire: Wire, drop: str) -> None:
    body = wire.modern_body("tools/list")
    del body["params"]["_meta"][drop]
    resp = await wire.post(body, wire.modern_headers("tools/list"))
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == -32602


async def test_header_checks_come_before_authentication(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list", **{"Mcp-Method": "tools/call"})
    del headers["Authorization"]
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 400


async def test_session_header_is_ignored_on_modern_requests(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list", **{"Mcp-Session-Id": "whatever"})
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 200
    assert "Mcp-Session-Id" not in resp.headers
