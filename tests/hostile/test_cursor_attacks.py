"""Cursor attacks over /mcp (docs/reading-rules.md): any cursor that is not, byte for byte, one the
service issued for this very request is VALIDATION_ERROR — bit flips, truncation, extension,
base64 re-encoding (padding, the `+/` alphabet, case), a cursor moved to another tool,
filter, limit, approval or account. A genuine cursor replayed after the workspace's read
generation changed is MCP_CURSOR_STALE with its fixed text.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.app_keys import DB_POOL
from tests.hostile.conftest import FUZZ, Hostile
from tests.hostile.wire import STALE_TEXT, Reply, check_answer
from tests.hostile.world import Granted

# A failing example of a 30 KiB body is reported either way; its long repr must not turn
# into a second, confusing warning-as-error.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


ROWS = {"get_many_workflows": "workflows", "get_many_executions": "executions"}


def b64decode(cursor: str) -> bytes:
    return base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))


def b64encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def issued(h: Hostile, granted: Granted, tool: str, **arguments: Any) -> dict[str, Any]:
    """Arguments of a second page: the first page's arguments plus its nextCursor."""
    first = {"limit": 1, **arguments}
    if tool != "get_many_workspaces":
        first.setdefault("workspaceId", str(granted.workspaces[0]))
    reply = await h.mcp.call(granted.token, tool, first)
    cursor = reply.structured["nextCursor"]
    assert isinstance(cursor, str) and cursor
    return {**first, "cursor": cursor}


def assert_invalid(reply: Reply) -> None:
    check_answer(reply)
    assert reply.status == 200, reply.body[:300]
    assert reply.error_code == "VALIDATION_ERROR", reply.body[:300]
    assert reply.result["content"][0]["text"].startswith("VALIDATION_ERROR: ")


TOOLS = ("get_many_workflows", "get_many_executions", "get_many_workspaces")


@given(data=st.data())
@FUZZ
async def test_tampered_cursors_are_validation_errors(
    hostile: Hostile, data: st.DataObject
) -> None:
    a = hostile.world.approvals["a"]
    tool = data.draw(st.sampled_from(TOOLS), label="tool")
    arguments = await issued(hostile, a, tool)
    cursor: str = arguments["cursor"]
    raw = b64decode(cursor)
    how = data.draw(st.sampled_from(["flip", "truncate", "extend", "chars", "splice"]), label="how")
    if how == "flip":
        bit = data.draw(st.integers(0, len(raw) * 8 - 1), label="bit")
        mutated = bytearray(raw)
        mutated[bit // 8] ^= 1 << (bit % 8)
        forged = b64encode(bytes(mutated))
    elif how == "truncate":
        forged = cursor[: data.draw(st.integers(1, len(cursor) - 1), label="keep")]
    elif how == "extend":
        forged = cursor + data.draw(st.text("ABCxyz019-_", min_size=1, max_size=8), label="tail")
    elif how == "chars":
        at = data.draw(st.integers(0, len(cursor) - 1), label="at")
        other = data.draw(st.sampled_from("Aa0-_Zz9"), label="char")
        if other == cursor[at]:
            other = "B" if cursor[at] != "B" else "C"
        forged = cursor[:at] + other + cursor[at + 1 :]
    else:
        # Another genuine cursor's head with this one's tail.
        donor = (await issued(hostile, a, tool))["cursor"]
        cut = data.draw(st.integers(1, len(cursor) - 1), label="cut")
        forged = donor[:cut] + cursor[cut:]
    if forged == cursor:
        return
    reply = await hostile.mcp.call(a.token, tool, {**arguments, "cursor": forged})
    assert_invalid(reply)


@pytest.mark.parametrize("tool", TOOLS)
async def test_reencoded_base64_is_refused(hostile: Hostile, tool: str) -> None:
    a = hostile.world.approvals["a"]
    arguments = await issued(hostile, a, tool)
    cursor = arguments["cursor"]
    raw = b64decode(cursor)
    variants = {
        cursor + "=" * (-len(cursor) % 4 or 4),  # padded
        cursor + "==",
        base64.b64encode(raw).decode(),  # standard alphabet with padding
        base64.b64encode(raw).decode().rstrip("="),  # standard alphabet, no padding
        cursor.swapcase(),
        " " + cursor,
        cursor + "\n",
        cursor.replace("-", "%2D").replace("_", "%5F"),
        raw.hex(),
    }
    variants.discard(cursor)
    for forged in sorted(variants):
        reply = await hostile.mcp.call(a.token, tool, {**arguments, "cursor": forged})
        assert_invalid(reply)
    # The genuine cursor still works, and replaying it gives the same page.
    first = await hostile.mcp.call(a.token, tool, arguments)
    second = await hostile.mcp.call(a.token, tool, arguments)
    assert first.structured == {**second.structured, "nextCursor": first.structured["nextCursor"]}


MOVES: list[tuple[str, dict[str, Any], str, dict[str, Any]]] = [
    # (issuing tool, its filters, presenting tool, filters presented with the cursor)
    ("get_many_workflows", {}, "get_many_executions", {}),
    ("get_many_executions", {}, "get_many_workflows", {}),
    ("get_many_workspaces", {}, "get_many_workflows", {}),
    ("get_many_workflows", {}, "get_many_workflows", {"limit": 2}),
    ("get_many_workflows", {}, "get_many_workflows", {"lifecycle": "all"}),
    ("get_many_workflows", {"lifecycle": "all"}, "get_many_workflows", {"lifecycle": "current"}),
    ("get_many_executions", {}, "get_many_executions", {"limit": 2}),
    ("get_many_executions", {}, "get_many_executions", {"status": "success"}),
    ("get_many_executions", {}, "get_many_executions", {"period": "30d"}),
    ("get_many_executions", {"period": "all"}, "get_many_executions", {"timeZone": "UTC"}),
    ("get_many_workspaces", {}, "get_many_workspaces", {"limit": 2}),
]


@pytest.mark.parametrize(("issuer", "filters", "presenter", "changed"), MOVES)
async def test_cursor_moved_to_another_tool_filter_or_limit(
    hostile: Hostile,
    issuer: str,
    filters: dict[str, Any],
    presenter: str,
    changed: dict[str, Any],
) -> None:
    a = hostile.world.approvals["a"]
    arguments = await issued(hostile, a, issuer, **filters)
    presented = {**arguments, **changed}
    if presenter == "get_many_workspaces":
        presented = {k: v for k, v in presented.items() if k in ("limit", "cursor")}
    elif "workspaceId" not in presented:
        presented["workspaceId"] = str(a.workspaces[0])
    if presenter == "get_many_workflows":
        presented = {k: v for k, v in presented.items() if k not in ("status", "period")}
    reply = await hostile.mcp.call(a.token, presenter, presented)
    assert_invalid(reply)


async def test_cursor_moved_to_another_workspace_or_instance(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    ws0, ws1 = (str(w) for w in a.workspaces[:2])
    tenant = hostile.world.tenants["a"]
    instances = [i["id"] for i in tenant.instances[ws0]]
    for tool in ROWS:
        arguments = await issued(hostile, a, tool)
        reply = await hostile.mcp.call(a.token, tool, {**arguments, "workspaceId": ws1})
        assert_invalid(reply)
        reply = await hostile.mcp.call(a.token, tool, {**arguments, "instanceId": instances[0]})
        assert_invalid(reply)
        scoped = await issued(hostile, a, tool, instanceId=instances[0])
        reply = await hostile.mcp.call(a.token, tool, {**scoped, "instanceId": instances[1]})
        assert_invalid(reply)
        # The same instance spelled in capitals is the same filter: accepted.
        upper = {**scoped, "instanceId": instances[0].upper()}
        reply = await hostile.mcp.call(a.token, tool, upper)
        assert not reply.is_tool_error, reply.body[:300]


async def test_cursor_moved_to_another_approval_or_account(hostile: Hostile) -> None:
    world = hostile.world
    a, a1, b = world.approvals["a"], world.approvals["a1"], world.approvals["b"]
    for tool in TOOLS:
        arguments = await issued(hostile, a, tool)
        # a1 is the same account and also holds workspaces[0]: only the approval differs.
        assert_invalid(await hostile.mcp.call(a1.token, tool, arguments))
        if tool == "get_many_workspaces":
            assert_invalid(await hostile.mcp.call(b.token, tool, arguments))
        else:
            moved = {**arguments, "workspaceId": str(b.workspaces[0])}
            assert_invalid(await hostile.mcp.call(b.token, tool, moved))


async def test_replay_after_read_generation_change_is_stale(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    ws0 = a.workspaces[0]
    pages = {tool: await issued(hostile, a, tool) for tool in ROWS}
    async with hostile.app[DB_POOL].acquire() as conn:
        await conn.execute(
            "UPDATE workspaces SET read_generation = read_generation + 1 WHERE id = $1", ws0
        )
    for tool, arguments in pages.items():
        reply = await hostile.mcp.call(a.token, tool, arguments)
        check_answer(reply)
        assert reply.error_code == "MCP_CURSOR_STALE", reply.body[:300]
        assert reply.result["content"][0]["text"] == STALE_TEXT
        assert reply.result["_meta"]["retryable"] is False
        # Tampering still wins over staleness: a forged cursor is never "stale".
        forged = arguments["cursor"][:-2] + ("AA" if arguments["cursor"][-2:] != "AA" else "BB")
        assert_invalid(await hostile.mcp.call(a.token, tool, {**arguments, "cursor": forged}))
        # Restarting without a cursor works and yields fresh cursors.
        fresh = await hostile.mcp.call(
            a.token, tool, {k: v for k, v in arguments.items() if k != "cursor"}
        )
        assert fresh.structured["nextCursor"]
    # Another workspace's cursors are unaffected by this workspace's generation.
    other = await issued(hostile, a, "get_many_workflows", workspaceId=str(a.workspaces[1]))
    assert not (await hostile.mcp.call(a.token, "get_many_workflows", other)).is_tool_error


@pytest.mark.parametrize(
    "cursor",
    ["", "A", "AAAA", "=", "A" * 4096, "A" * 4097, "\x00", "\ud800", "é" * 10, "null", "a.b.c"],
)
async def test_garbage_cursors_are_validation_errors(hostile: Hostile, cursor: str) -> None:
    a = hostile.world.approvals["a"]
    for tool in TOOLS:
        arguments: dict[str, Any] = {"cursor": cursor}
        if tool != "get_many_workspaces":
            arguments["workspaceId"] = str(a.workspaces[0])
        reply = await hostile.mcp.call(a.token, tool, arguments)
        if cursor == "\ud800":
            # An escaped lone surrogate is not Unicode text: msgspec refuses the whole body.
            check_answer(reply)
            assert reply.status == 400 and reply.json["error"]["code"] == -32700
            continue
        assert_invalid(reply)


async def test_cursor_of_a_random_workspace_id_is_not_a_probe(hostile: Hostile) -> None:
    """A genuine cursor presented with an ungranted workspace never reveals that workspace:
    the answer is a refusal either way (cursor first by precedence, or NOT_FOUND)."""
    a = hostile.world.approvals["a"]
    arguments = await issued(hostile, a, "get_many_workflows")
    for ws in (str(uuid.uuid4()), str(hostile.world.approvals["b"].workspaces[0])):
        reply = await hostile.mcp.call(
            a.token, "get_many_workflows", {**arguments, "workspaceId": ws}
        )
        check_answer(reply)
        assert reply.error_code in ("VALIDATION_ERROR", "NOT_FOUND")
