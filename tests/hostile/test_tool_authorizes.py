"""Tools that read their caller's approval in their own first statement (`Tool.authorizes`:
get_many_executions, get_execution, get_execution_stats): the transport verifies only the
token, and the tool's statement confirms the approval. Nothing about the answer may change:

- an approval revoked, expired, replaced or deleted is a 401 on the next call, whatever
  else is wrong with the request (bad arguments, zone, cursor, another tenant's workspace);
- a token without the tool's scope is a 403 before any argument error;
- a live approval gets NOT_FOUND for a workspace it does not hold (another tenant's, or one
  whose membership was lost) and its rows otherwise;
- the refusal is counted once in the auth metrics, and the approval is read once a call.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from service.app_keys import APPROVAL_READS, CURSORS, DB_POOL, METRICS, TOKENS
from service.auth.approvals import create_operator_client, grant_approval, issue_tokens
from service.auth.authorization import Authorization
from service.auth.caller import Caller
from service.tools.base import ToolContext
from service.tools.executions import TOOLS as EXECUTION_TOOLS
from tests.hostile.conftest import Hostile
from tests.hostile.test_token_attacks import _session_headers, assert_refused, initialize
from tests.hostile.wire import Reply, check_answer
from tests.hostile.world import Granted

AUTHORIZING = ("get_many_executions", "get_execution", "get_execution_stats")


def arguments(tool: str, workspace: uuid.UUID, execution: str | None = None) -> dict[str, Any]:
    if tool == "get_execution":
        return {"workspaceId": str(workspace), "executionId": execution or str(uuid.uuid4())}
    if tool == "get_execution_stats":
        return {"workspaceId": str(workspace), "period": "7d", "timeZone": "UTC"}
    return {"workspaceId": str(workspace), "limit": 2}


def broken(tool: str, workspace: uuid.UUID, foreign: uuid.UUID) -> list[dict[str, Any]]:
    """Requests with something else wrong: each alone is a tool error for a live approval."""
    good = arguments(tool, workspace)
    cases = [
        {**good, "workspaceId": "not-a-uuid"},
        {**good, "unexpected": 1},
        arguments(tool, foreign),
        arguments(tool, uuid.uuid4()),
    ]
    if tool == "get_many_executions":
        cases += [{**good, "timeZone": "Mars/Olympus"}, {**good, "cursor": "AAAA"}]
    if tool == "get_execution_stats":
        cases.append({**good, "timeZone": "Mars/Olympus"})
    return cases


def _auth_count(h: Hostile, reason: str) -> float:
    value = h.app[METRICS].registry.get_sample_value(
        "elova_mcp_auth_failures_total", {"reason": reason}
    )
    return value or 0.0


def _approval_reads(h: Hostile) -> float:
    value = h.app[METRICS].registry.get_sample_value(
        "elova_mcp_db_call_duration_seconds_count", {"operation": "auth"}
    )
    return value or 0.0


async def _revoke(h: Hostile, g: Granted) -> None:
    await h.app[DB_POOL].execute(
        "UPDATE approvals SET revoked_at = now() WHERE id = $1", g.approval_id
    )


async def _expire(h: Hostile, g: Granted) -> None:
    await h.app[DB_POOL].execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1",
        g.approval_id,
    )


async def _replace(h: Hostile, g: Granted) -> None:
    async with h.app[DB_POOL].acquire() as conn:
        await grant_approval(
            conn,
            account_id=g.account_id,
            client_id=g.approval.client_id,
            workspace_ids=g.workspaces,
            scopes="workspaces:read n8n:read",
            expires="1d",
        )


async def _delete(h: Hostile, g: Granted) -> None:
    await h.app[DB_POOL].execute("DELETE FROM approvals WHERE id = $1", g.approval_id)


ENDINGS: dict[str, Callable[[Hostile, Granted], Awaitable[None]]] = {
    "revoked": _revoke,
    "expired": _expire,
    "replaced": _replace,
    "deleted": _delete,
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_an_ended_approval_is_401_whatever_else_is_wrong(
    hostile: Hostile, ending: str
) -> None:
    a = hostile.world.approvals["a"]
    foreign = hostile.world.approvals["b"].workspaces[0]
    for tool in AUTHORIZING:
        ok = await hostile.mcp.call(a.token, tool, arguments(tool, a.workspaces[0]))
        check_answer(ok)
        assert ok.status == 200 and (tool == "get_execution" or not ok.is_tool_error), ok.body
    await ENDINGS[ending](hostile, a)
    reason = "approval_expired" if ending == "expired" else "revoked"
    before = _auth_count(hostile, reason)
    calls = 0
    for tool in AUTHORIZING:
        for args in [arguments(tool, a.workspaces[0]), *broken(tool, a.workspaces[0], foreign)]:
            assert_refused(await hostile.mcp.call(a.token, tool, args))
            calls += 1
    assert _auth_count(hostile, reason) - before == calls


async def test_a_live_approval_gets_rows_and_not_found_for_what_it_does_not_hold(
    hostile: Hostile,
) -> None:
    a = hostile.world.approvals["a"]
    b = hostile.world.approvals["b"]
    page = await hostile.mcp.call(
        a.token, "get_many_executions", arguments("get_many_executions", a.workspaces[0])
    )
    rows = page.structured["executions"]
    assert rows and page.structured["nextCursor"]
    one = await hostile.mcp.call(
        a.token, "get_execution", arguments("get_execution", a.workspaces[0], rows[0]["id"])
    )
    assert one.structured["execution"]["id"] == rows[0]["id"]
    unapproved = uuid.UUID(str(hostile.world.tenants["a"].workspaces[-1]["id"]))
    assert unapproved not in a.workspaces
    for tool in AUTHORIZING:
        for workspace in (b.workspaces[0], unapproved, uuid.uuid4()):
            reply = await hostile.mcp.call(a.token, tool, arguments(tool, workspace))
            assert reply.error_code == "NOT_FOUND", (tool, reply.body[:300])
            assert "TENANT-B" not in reply.body.decode()
    # A membership lost after the approval: that workspace is NOT_FOUND on the next call.
    lost = a.workspaces[1]
    await hostile.app[DB_POOL].execute(
        "DELETE FROM memberships WHERE account_id = $1 AND workspace_id = $2", a.account_id, lost
    )
    for tool in AUTHORIZING:
        reply = await hostile.mcp.call(a.token, tool, arguments(tool, lost))
        assert reply.error_code == "NOT_FOUND", (tool, reply.body[:300])


async def test_a_cursor_of_another_eligible_set_is_refused(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    args = arguments("get_many_executions", a.workspaces[0])
    cursor = (await hostile.mcp.call(a.token, "get_many_executions", args)).structured["nextCursor"]
    again = await hostile.mcp.call(a.token, "get_many_executions", {**args, "cursor": cursor})
    assert again.status == 200 and not again.is_tool_error
    # Another approval of the same account (another eligible set) cannot use it.
    a1 = hostile.world.approvals["a1"]
    other = await hostile.mcp.call(a1.token, "get_many_executions", {**args, "cursor": cursor})
    assert other.error_code == "VALIDATION_ERROR", other.body[:300]


async def test_missing_scope_is_403_before_argument_errors(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    async with hostile.app[DB_POOL].acquire() as conn:
        approval = await grant_approval(
            conn,
            account_id=a.account_id,
            client_id=(await _client(conn)),
            workspace_ids=a.workspaces,
            scopes="workspaces:read",
            expires="1d",
        )
        token = (await issue_tokens(conn, hostile.app[TOKENS], approval)).access_token
    for tool in AUTHORIZING:
        for args in [arguments(tool, a.workspaces[0]), {"workspaceId": "nope"}, {}]:
            reply = await hostile.mcp.call(token, tool, args)
            assert_refused(reply, error="insufficient_scope", status=403)
    # Revoked and scope-less: the 401 wins.
    await hostile.app[DB_POOL].execute(
        "UPDATE approvals SET revoked_at = now() WHERE id = $1", approval.id
    )
    assert_refused(await hostile.mcp.call(token, "get_many_executions", {"workspaceId": "nope"}))


async def _client(conn: Any) -> str:
    return await create_operator_client(conn, "scope-less")


async def test_the_approval_is_read_once_a_call(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    args = arguments("get_many_executions", a.workspaces[0])
    before = _approval_reads(hostile)
    for _ in range(3):
        reply = await hostile.mcp.call(a.token, "get_many_executions", args)
        assert reply.status == 200 and not reply.is_tool_error
    # The tool's own statement read it: the bearer check did not read it a second time.
    assert _approval_reads(hostile) == before
    # A tool that does not read it itself still has it read by the bearer check.
    await hostile.mcp.call(a.token, "get_many_workspaces", {})
    assert _approval_reads(hostile) == before + 1


async def test_revoked_mid_session_is_401_for_the_authorizing_tools(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    session = await initialize(hostile, a.token)
    headers = _session_headers(a.token, session)

    async def call(tool: str) -> Reply:
        params = {"name": tool, "arguments": arguments(tool, a.workspaces[0])}
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
        return await hostile.mcp.post(json.dumps(body).encode(), headers)

    assert (await call("get_execution_stats")).status == 200
    await _revoke(hostile, a)
    for tool in AUTHORIZING:
        assert_refused(await call(tool))


async def _page(h: Hostile, caller: Caller, now: datetime, **arguments: Any) -> dict[str, Any]:
    tool = next(t for t in EXECUTION_TOOLS if t.name == "get_many_executions")
    authorization = Authorization(caller, h.app[APPROVAL_READS].read)
    authorization.require(tool.name, tool.scope)
    ctx = ToolContext(
        pool=h.app[DB_POOL],
        authorization=authorization,
        cursors=h.app[CURSORS],
        now=now,
        max_response_bytes=256 * 1024,
        response_overhead=200,
    )
    output: dict[str, Any] = msgspec.to_builtins(
        await tool.handler(ctx, tool.decode(msgspec.json.encode(arguments)))
    )
    assert ctx.caller.confirmed
    output["nextCursor"] = output["nextCursor"] is not None  # cursors carry a random nonce
    return output


async def test_one_statement_first_pages_equal_the_two_statement_ones(hostile: Hostile) -> None:
    """A pending caller's first page (approval, scope and rows in one statement) is the page
    a confirmed caller gets from the scope and page statements, for every filter shape."""
    a = hostile.world.approvals["a"]
    pending = Caller.pending(
        account_id=a.account_id,
        approval_id=a.approval_id,
        generation=a.approval.generation,
        client_id=a.approval.client_id,
        scopes=frozenset({"n8n:read", "workspaces:read"}),
    )
    confirmed = await Authorization(pending, hostile.app[APPROVAL_READS].read).confirm()
    workspace = a.workspaces[0]
    pool = hostile.app[DB_POOL]
    instance = await pool.fetchval("SELECT id FROM instances WHERE workspace_id = $1", workspace)
    workflow, home = await pool.fetchrow(
        "SELECT id, instance_id FROM workflows WHERE workspace_id = $1 LIMIT 1", workspace
    )
    elsewhere = await pool.fetchval(
        "SELECT id FROM instances WHERE workspace_id = $1 AND id <> $2", workspace, home
    )
    now = datetime.now(UTC)
    base = {"workspaceId": str(workspace)}
    shapes: list[dict[str, Any]] = [
        {},
        {"limit": 1},
        {"status": "failed"},
        {"status": "success", "limit": 3},
        {"instanceId": str(instance)},
        {"workflowId": str(workflow)},
        {"workflowId": str(workflow), "instanceId": str(home)},
        {"period": "7d", "timeZone": "Pacific/Auckland"},
        {"period": "30d", "timeZone": "UTC", "status": "failed", "instanceId": str(instance)},
        {"period": "today", "timeZone": "America/Santiago"},
    ]
    if elsewhere is not None:
        shapes.append({"workflowId": str(workflow), "instanceId": str(elsewhere)})
    for shape in shapes:
        one = await _page(hostile, pending, now, **base, **shape)
        two = await _page(hostile, confirmed, now, **base, **shape)
        assert one == two, shape
    # Without an explicit zone a windowed period needs the workspace's zone: two statements,
    # the same page.
    one = await _page(hostile, pending, now, **base, period="7d")
    assert one == await _page(hostile, confirmed, now, **base, period="7d")
