"""Fuzzing /mcp over HTTP with a real token: tool arguments generated from the catalog's
schemas and mutated beyond them, JSON-RPC envelopes, raw bodies and header combinations.

Every answer must be deliberate (`check_answer`): a well-formed JSON-RPC error or tool
result, never a 5xx, a traceback or a hang. After each test the same app still answers
/livez and a normal call (the `fuzzed` fixture checks on the way out).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile.conftest import FUZZ, Hostile, HostileFactory
from tests.hostile.strategies import (
    Pairs,
    RawJson,
    any_json,
    catalog,
    deep,
    from_schema,
    hostile_value,
    mutated_arguments,
    odd_text,
    render,
)
from tests.hostile.wire import Reply, check_answer, modern_body, modern_headers
from tests.hostile.world import uuids_in

# A failing example of a 30 KiB body is reported either way; its long repr must not turn
# into a second, confusing warning-as-error.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


REQUEST_TIMEOUT = 15.0
TOOLS = sorted(catalog())


@pytest.fixture
async def fuzzed(make_hostile: HostileFactory) -> AsyncIterator[Hostile]:
    h = await make_hostile()
    yield h
    await assert_healthy(h)


async def assert_healthy(h: Hostile) -> None:
    live = await h.client.get("/livez")
    assert live.status == 200
    reply = await h.mcp.call(h.world.approvals["a"].token, "get_many_workspaces", {"limit": 50})
    assert reply.status == 200
    names = [w["id"] for w in reply.structured["workspaces"]]
    assert sorted(names) == sorted(str(w) for w in h.world.approvals["a"].workspaces)


async def post(h: Hostile, body: bytes, headers: dict[str, str]) -> Reply:
    async with asyncio.timeout(REQUEST_TIMEOUT):
        reply = await h.mcp.post(body, headers)
    check_answer(reply)
    return reply


def world_ids(h: Hostile) -> st.SearchStrategy[str]:
    return st.sampled_from(sorted(h.world.all_ids()))


def assert_only_own_rows(h: Hostile, reply: Reply) -> None:
    if reply.status == 200 and "result" in reply.json and not reply.result.get("isError"):
        leaked = uuids_in(reply.result) - h.world.ids_of(h.world.approvals["a"])
        assert not leaked, f"ids outside the caller's workspaces: {leaked}"


@given(data=st.data())
@FUZZ
async def test_schema_valid_arguments_answer_or_refuse_cleanly(
    fuzzed: Hostile, data: st.DataObject
) -> None:
    h = fuzzed
    tool = data.draw(st.sampled_from(TOOLS), label="tool")
    arguments = data.draw(from_schema(catalog()[tool], world_ids(h)), label="arguments")
    token = h.world.approvals["a"].token
    body = modern_body("tools/call", {"name": tool, "arguments": arguments})
    reply = await post(h, body, modern_headers(token, "tools/call", tool))
    assert reply.status == 200, reply.body[:300]
    if reply.is_tool_error:
        assert reply.error_code in ("VALIDATION_ERROR", "NOT_FOUND"), reply.body[:300]
    assert_only_own_rows(h, reply)


@given(data=st.data())
@FUZZ
async def test_mutated_arguments_are_tool_errors(fuzzed: Hostile, data: st.DataObject) -> None:
    h = fuzzed
    tool = data.draw(st.sampled_from(TOOLS), label="tool")
    arguments = data.draw(mutated_arguments(tool, world_ids(h)), label="arguments")
    ascii_only = data.draw(st.booleans(), label="ascii_only")
    params = Pairs((("name", tool), ("arguments", arguments)))
    body = _modern_envelope(params, ascii_only)
    if len(body) > 32 * 1024:
        reply = await post(
            h, body, modern_headers(h.world.approvals["a"].token, "tools/call", tool)
        )
        assert reply.status == 413
        return
    reply = await post(h, body, modern_headers(h.world.approvals["a"].token, "tools/call", tool))
    # A duplicated `name` may make the body disagree with Mcp-Name (400); otherwise the
    # arguments reach the tool, which answers or refuses them as a tool error.
    assert reply.status in (200, 400), reply.body[:300]
    if reply.status == 200 and "result" in reply.json and reply.is_tool_error:
        assert reply.error_code in ("VALIDATION_ERROR", "NOT_FOUND"), reply.body[:300]
    assert_only_own_rows(h, reply)


def _modern_envelope(params: Pairs, ascii_only: bool = True) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    full = Pairs((*params.items, ("_meta", meta)))
    envelope = Pairs((("jsonrpc", "2.0"), ("id", 7), ("method", "tools/call"), ("params", full)))
    return render(envelope, ascii_only=ascii_only).encode("utf-8", "surrogatepass")


ids = st.one_of(
    st.integers(-(2**70), 2**70),
    odd_text,
    st.none(),
    st.floats(allow_nan=False),
    st.booleans(),
    any_json,
    st.sampled_from([RawJson("1e999"), RawJson("-0"), RawJson("1" + "0" * 400)]),
)
methods = st.one_of(
    st.sampled_from(
        ["tools/call", "tools/list", "server/discover", "initialize", "ping", "resources/read",
         "prompts/get", "notifications/initialized", "tools/call ", "TOOLS/CALL", ""]
    ),
    odd_text,
    any_json,
)  # fmt: skip


@st.composite
def envelopes(draw: st.DrawFn) -> Any:
    members: list[tuple[str, Any]] = []
    if draw(st.booleans()):
        members.append(("jsonrpc", draw(st.one_of(st.just("2.0"), st.just("1.0"), any_json))))
    if draw(st.booleans()):
        members.append(("id", draw(ids)))
    if draw(st.booleans()):
        members.append(("method", draw(methods)))
    if draw(st.booleans()):
        members.append(("params", draw(st.one_of(any_json, deep, hostile_value))))
    for _ in range(draw(st.integers(0, 2))):
        key = draw(
            st.sampled_from(["id", "method", "jsonrpc", "params", "result", "error"]) | odd_text
        )
        members.append((key, draw(any_json)))
    members = draw(st.permutations(members))
    if draw(st.integers(0, 9)) == 0:
        return draw(st.lists(st.just(Pairs(tuple(members))), max_size=3))  # a batch
    return Pairs(tuple(members))


@given(data=st.data())
@FUZZ
async def test_envelopes_get_json_rpc_errors(fuzzed: Hostile, data: st.DataObject) -> None:
    h = fuzzed
    document = data.draw(envelopes(), label="envelope")
    body = render(document).encode()
    method = data.draw(st.sampled_from(["tools/call", "tools/list", "server/discover"]))
    headers = modern_headers(h.world.approvals["a"].token, method, "get_workspace")
    await post(h, body, headers)


raw_bodies = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
    deep.map(lambda r: r.text.encode()),
    st.sampled_from(
        [b"", b"null", b"[]", b"{}", b'"x"', b"1", b"\xef\xbb\xbf{}", b'{"jsonrpc":"2.0"',
         b"\xff\xfe{", b'{"a":1}{"b":2}', b"\x00", b'{"jsonrpc":"2.0","id":1,"method":"ping"}\x00']
    ),
    st.integers(0, 4000).map(lambda n: modern_body("tools/call", {"name": "get_workspace"})[:n]),
)  # fmt: skip


@given(body=raw_bodies)
@FUZZ
async def test_raw_bodies_are_parse_errors_not_crashes(fuzzed: Hostile, body: bytes) -> None:
    h = fuzzed
    headers = modern_headers(h.world.approvals["a"].token, "tools/call", "get_workspace")
    await post(h, body, headers)


HEADER_VALUES: dict[str, st.SearchStrategy[str | None]] = {
    "Content-Type": st.sampled_from(
        [None, "application/json", "text/plain", "application/json; charset=latin-1",
         "application/x-www-form-urlencoded", "application/json, text/plain", ""]
    ),
    "Accept": st.sampled_from(
        [None, "application/json", "text/event-stream", "application/json;q=0", "*/*", "image/png"]
    ),
    "MCP-Protocol-Version": st.sampled_from(
        [None, "2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26", "1999-01-01", "2026-07-28 "]
    ),
    "Mcp-Method": st.sampled_from([None, "tools/call", "tools/list", "ping", "x"]),
    "Mcp-Name": st.sampled_from(
        [None, "get_workspace", "=?base64?Z2V0X3dvcmtzcGFjZQ==?=", "=?base64?!!!?=", "=?base64??=",
         "get_many_workspaces", "Get_Workspace"]
    ),
    "Mcp-Session-Id": st.sampled_from([None, "x", "0" * 200, "ab.cd.ef"]),
    "Origin": st.sampled_from([None, "http://127.0.0.1:8080", "https://evil.example", "null"]),
    "Authorization": st.sampled_from(
        [None, "good", "Bearer", "Basic Zm9vOmJhcg==", "Bearer a.b.c"]
    ),
}  # fmt: skip


@given(data=st.data())
@FUZZ
async def test_header_combinations_are_refused_cleanly(
    fuzzed: Hostile, data: st.DataObject
) -> None:
    h = fuzzed
    token = h.world.approvals["a"].token
    headers: dict[str, str] = {}
    for name, values in HEADER_VALUES.items():
        value = data.draw(values, label=name)
        if value == "good":
            value = f"Bearer {token}"
        if value is not None:
            headers[name] = value
    tool = data.draw(st.sampled_from(TOOLS), label="tool")
    arguments = {"workspaceId": str(h.world.approvals["a"].workspaces[0])}
    body = modern_body("tools/call", {"name": tool, "arguments": arguments})
    if data.draw(st.booleans(), label="session body"):
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                           "params": {"name": tool, "arguments": {}}}).encode()  # fmt: skip
    await post(h, body, headers)


async def test_deeply_nested_arguments_are_validation_errors(fuzzed: Hostile) -> None:
    h = fuzzed
    token = h.world.approvals["a"].token
    for depth in (100, 1000, 5000, 16000):
        for where in ("arguments", "unknown", "workspaceId", "params", "id", "_meta"):
            body = _nested_body(where, depth)
            if len(body) > 32 * 1024:
                continue
            reply = await post(h, body, modern_headers(token, "tools/call", "get_workspace"))
            assert reply.status == 400, (where, depth, reply.body[:300])
            error = reply.json["error"]
            assert error["code"] == -32600, error
            # A nested id is refused for its type before its depth matters.
            assert "nested deeper than" in error["message"] or where == "id", error


def _nested_body(where: str, depth: int) -> bytes:
    inner = "[" * depth + "]" * depth
    args = '{"workspaceId":"00000000-0000-0000-0000-000000000000"}'
    meta = ('{"io.modelcontextprotocol/protocolVersion":"2026-07-28",'
            '"io.modelcontextprotocol/clientCapabilities":{}}')  # fmt: skip
    request_id = "1"
    if where == "arguments":
        args = inner
    elif where == "unknown":
        args = '{"workspaceId":"00000000-0000-0000-0000-000000000000","x":' + inner + "}"
    elif where == "workspaceId":
        args = '{"workspaceId":' + inner + "}"
    elif where == "_meta":
        meta = meta[:-1] + ',"deep":' + inner + "}"
    elif where == "id":
        request_id = inner
    params = '{"name":"get_workspace","arguments":' + args + ',"_meta":' + meta + "}"
    if where == "params":
        params = inner
    text = '{"jsonrpc":"2.0","id":' + request_id + ',"method":"tools/call","params":' + params + "}"
    return text.encode()


async def test_oversized_body_is_413_and_the_server_stays_up(fuzzed: Hostile) -> None:
    h = fuzzed
    token = h.world.approvals["a"].token
    cursor = "A" * (40 * 1024)
    body = modern_body(
        "tools/call", {"name": "get_many_workspaces", "arguments": {"cursor": cursor}}
    )
    reply = await post(h, body, modern_headers(token, "tools/call", "get_many_workspaces"))
    assert reply.status == 413
