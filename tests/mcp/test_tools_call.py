"""`tools/call` on the wire: lookup, scope, arguments, deadline, dependency failures, the
shape of results and tool errors in both eras, and the response bound.

Stand-in handlers are bound to catalog names for behaviours no real tool shows on demand
(sleeping past the deadline, losing the database, overflowing); everything else runs the
real tools against PostgreSQL.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import msgspec
import pytest

from service.app_keys import CATALOG
from service.errors import NotFound
from service.tools.base import Output, Params, Tool, ToolContext
from tests.mcp.conftest import EXPECTED_SERVER_INFO, Wire, WireFactory

SERVER_INFO = EXPECTED_SERVER_INFO


class PadParams(Params):
    size: int = 0


class Padded(Output):
    pad: str


def stand_in(wire: Wire, name: str, handler: Any, scope: str = "n8n:read") -> None:
    wire.app[CATALOG].implementations[name] = Tool(name, scope, PadParams, handler)


async def call(wire: Wire, name: str, arguments: Any = None, request_id: Any = 1) -> Any:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    resp = await wire.modern("tools/call", params, request_id)
    return resp


async def test_success_golden(wire: Wire) -> None:
    resp = await call(wire, "get_many_workspaces", {"limit": 10})
    assert resp.status == 200
    result = (await resp.json())["result"]
    structured = result.pop("structuredContent")
    assert [w["id"] for w in structured["workspaces"]] == [str(wire.workspace_id)]
    assert result == {
        "resultType": "complete",
        "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
        "content": [{"type": "text", "text": result["content"][0]["text"]}],
        "isError": False,
    }
    assert json.loads(result["content"][0]["text"]) == structured


async def test_missing_arguments_mean_an_empty_object(wire: Wire) -> None:
    resp = await call(wire, "get_many_workspaces")
    assert (await resp.json())["result"]["isError"] is False


@pytest.mark.parametrize("arguments", [[], "x", 3, None])
async def test_arguments_not_an_object_are_a_validation_error(wire: Wire, arguments: Any) -> None:
    body = wire.modern_body("tools/call", {"name": "get_many_workspaces", "arguments": arguments})
    resp = await wire.post(body, wire.modern_headers("tools/call", "get_many_workspaces"))
    assert resp.status == 200
    result = (await resp.json())["result"]
    assert result == {
        "resultType": "complete",
        "_meta": {
            "code": "VALIDATION_ERROR",
            "message": "The arguments must be a JSON object.",
            "retryable": False,
            "hint": result["_meta"]["hint"],
            "io.modelcontextprotocol/serverInfo": SERVER_INFO,
        },
        "content": [
            {"type": "text", "text": "VALIDATION_ERROR: The arguments must be a JSON object."}
        ],
        "isError": True,
    }
    assert "structuredContent" not in result


async def test_unknown_argument_is_a_validation_error(wire: Wire) -> None:
    resp = await call(wire, "get_many_workspaces", {"limit": 5, "colour": "red"})
    result = (await resp.json())["result"]
    assert result["isError"] is True
    assert result["_meta"]["code"] == "VALIDATION_ERROR"
    assert "colour" in result["content"][0]["text"]


async def test_unknown_tool_is_invalid_params(wire: Wire) -> None:
    resp = await call(wire, "delete_everything", {}, request_id="x")
    assert resp.status == 200
    assert await resp.json() == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32602, "message": "Unknown tool: delete_everything"},
    }


async def test_missing_scope_is_403_before_arguments_are_read(make_wire: WireFactory) -> None:
    wire = await make_wire(scopes="n8n:read")
    resp = await call(wire, "get_many_workspaces", {"limit": "not a number"})
    assert resp.status == 403
    challenge = resp.headers["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="workspaces:read"' in challenge
    assert (await resp.json())["error"]["code"] == 403
    # The scope it has still works.
    resp = await call(wire, "get_many_instances", {"workspaceId": str(wire.workspace_id)})
    assert resp.status == 200


async def test_tool_error_in_a_session_has_no_2026_fields(wire: Wire) -> None:
    sid = await wire.initialize()
    resp = await wire.legacy(
        sid,
        "tools/call",
        {
            "name": "get_workspace",
            "arguments": {"workspaceId": "11111111-1111-4111-8111-111111111111"},
        },
    )
    result = (await resp.json())["result"]
    assert result == {
        "content": [{"type": "text", "text": result["content"][0]["text"]}],
        "isError": True,
        "_meta": {"code": "NOT_FOUND", "message": result["_meta"]["message"], "retryable": False},
    }
    assert result["content"][0]["text"].startswith("NOT_FOUND: ")


async def test_handler_tool_error(wire: Wire) -> None:
    async def missing(ctx: ToolContext, params: PadParams) -> Padded:
        raise NotFound("No such execution.", hint="List executions first.")

    stand_in(wire, "get_execution", missing)
    result = (await (await call(wire, "get_execution", {})).json())["result"]
    assert result["content"] == [{"type": "text", "text": "NOT_FOUND: No such execution."}]
    assert result["_meta"]["hint"] == "List executions first."


async def test_deadline(make_wire: WireFactory) -> None:
    wire = await make_wire(REQUEST_DEADLINE_SECONDS="0.2")

    async def slow(ctx: ToolContext, params: PadParams) -> Padded:
        await asyncio.sleep(5)
        return Padded(pad="")

    stand_in(wire, "get_execution", slow)
    result = (await (await call(wire, "get_execution", {})).json())["result"]
    assert result["isError"] is True
    assert result["_meta"]["code"] == "DEADLINE_EXCEEDED"
    assert result["_meta"]["retryable"] is True


async def test_lost_database_is_unavailable_and_retryable(wire: Wire) -> None:
    async def refused(ctx: ToolContext, params: PadParams) -> Padded:
        raise ConnectionRefusedError(111, "Connect call failed ('10.0.0.9', 5432)")

    stand_in(wire, "get_execution", refused)
    result = (await (await call(wire, "get_execution", {})).json())["result"]
    assert result["_meta"]["code"] == "UNAVAILABLE"
    assert result["_meta"]["retryable"] is True
    assert result["_meta"]["retryAfterSeconds"] == 1
    assert "10.0.0.9" not in json.dumps(result)


async def test_unexpected_failure_reveals_nothing(wire: Wire) -> None:
    async def broken(ctx: ToolContext, params: PadParams) -> Padded:
        raise RuntimeError("SELECT secret FROM credentials WHERE password = 'hunter2'")

    stand_in(wire, "get_execution", broken)
    resp = await call(wire, "get_execution", {}, request_id=42)
    assert resp.status == 500
    text = await resp.text()
    assert "hunter2" not in text and "SELECT" not in text and "Traceback" not in text
    assert json.loads(text) == {
        "jsonrpc": "2.0",
        "id": 42,
        "error": {"code": -32603, "message": "Internal error"},
    }


@pytest.mark.parametrize("request_id", [1, "a-much-longer-request-identifier-" * 3])
@pytest.mark.parametrize("legacy", [False, True])
async def test_fits_is_exact_at_the_response_bound(
    make_wire: WireFactory, request_id: Any, legacy: bool
) -> None:
    bound = 4096
    wire = await make_wire(MAX_RESPONSE_BYTES=str(bound))

    async def largest(ctx: ToolContext, params: PadParams) -> Padded:
        low, high = 0, bound
        while low < high:  # the longest pad that still fits
            mid = (low + high + 1) // 2
            if ctx.fits(msgspec.json.encode(Padded(pad='"é' * (mid // 2) + "x" * (mid % 2)))):
                low = mid
            else:
                high = mid - 1
        return Padded(pad='"é' * (low // 2) + "x" * (low % 2))

    stand_in(wire, "get_execution", largest)
    if legacy:
        sid = await wire.initialize()
        resp = await wire.legacy(
            sid, "tools/call", {"name": "get_execution", "arguments": {}}, request_id=request_id
        )
    else:
        resp = await call(wire, "get_execution", {}, request_id=request_id)
    body = await resp.read()
    assert resp.status == 200
    assert json.loads(body)["result"]["isError"] is False
    # One more character would not fit: the budget is used to within one character.
    assert bound - 8 < len(body) <= bound


async def test_oversized_result_is_refused_not_sent(make_wire: WireFactory) -> None:
    wire = await make_wire(MAX_RESPONSE_BYTES="2048")

    async def careless(ctx: ToolContext, params: PadParams) -> Padded:
        return Padded(pad="x" * 4096)

    stand_in(wire, "get_execution", careless)
    resp = await call(wire, "get_execution", {})
    assert resp.status == 500
    assert (await resp.json())["error"] == {"code": -32603, "message": "Internal error"}


async def test_over_the_rate_budget_is_429(make_wire: WireFactory) -> None:
    wire = await make_wire(LIMIT_APPROVAL_PER_MINUTE="1")
    first = await wire.modern("tools/list")
    assert first.status == 200
    assert "RateLimit" in first.headers
    resp = await wire.modern("tools/list", request_id=2)
    assert resp.status == 429
    retry_after = int(resp.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    answer = await resp.json()
    assert answer["id"] == 2
    assert answer["error"]["code"] == 429
    assert answer["error"]["data"] == {"limit": "approval", "retryAfterSeconds": retry_after}
    # Notifications are not admitted, so they are not refused either.
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
    assert (await wire.post(body, wire.modern_headers("notifications/cancelled"))).status == 202


async def test_admission_slot_is_released_after_a_deadline(make_wire: WireFactory) -> None:
    wire = await make_wire(LIMIT_ACCOUNT_CONCURRENCY="1", REQUEST_DEADLINE_SECONDS="0.2")

    async def slow(ctx: ToolContext, params: PadParams) -> Padded:
        await asyncio.sleep(5)
        return Padded(pad="")

    stand_in(wire, "get_execution", slow)
    result = (await (await call(wire, "get_execution", {})).json())["result"]
    assert result["_meta"]["code"] == "DEADLINE_EXCEEDED"
    assert (await wire.modern("tools/list")).status == 200


async def test_admission_slot_is_released_when_the_client_goes_away(make_wire: WireFactory) -> None:
    wire = await make_wire(LIMIT_ACCOUNT_CONCURRENCY="1")
    finished = asyncio.Event()

    async def slow(ctx: ToolContext, params: PadParams) -> Padded:
        try:
            await asyncio.sleep(0.5)
            return Padded(pad="")
        finally:
            finished.set()

    stand_in(wire, "get_execution", slow)
    body = wire.modern_body("tools/call", {"name": "get_execution", "arguments": {}})
    with pytest.raises(asyncio.TimeoutError):
        await wire.client.post(
            "/mcp",
            data=msgspec.json.encode(body),
            headers=wire.modern_headers("tools/call", "get_execution"),
            timeout=aiohttp.ClientTimeout(total=0.1),
        )
    await asyncio.wait_for(finished.wait(), 5)
    for _ in range(50):  # the release runs just after the handler returns
        resp = await wire.modern("tools/list")
        if resp.status == 200:
            break
        await asyncio.sleep(0.05)
    assert resp.status == 200


async def test_success_in_a_session_golden(wire: Wire) -> None:
    sid = await wire.initialize("2025-06-18")
    resp = await wire.legacy(
        sid, "tools/call", {"name": "get_many_workspaces"}, request_id="s1", version="2025-06-18"
    )
    answer = await resp.json()
    assert answer["id"] == "s1"
    result = answer["result"]
    assert sorted(result) == ["content", "isError", "structuredContent"]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
