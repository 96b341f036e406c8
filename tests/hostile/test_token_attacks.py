"""Token attacks at the real /mcp endpoint that tests/auth (a probe behind the bearer check)
does not cover: approvals revoked or expired in the middle of a session, refresh-token
replay and its effect on the very next call, tokens in the query string of /mcp, sessions
carried over to another approval's token, and a re-approval mid-session.

Every refusal is HTTP 401 with `WWW-Authenticate: Bearer resource_metadata=…` naming the
error (404 for a session that is not this approval's), and never carries tool output.
"""

from __future__ import annotations

import json
import uuid

from service.app_keys import DB_POOL, TOKENS
from service.auth.approvals import (
    IssuedTokens,
    grant_approval,
    issue_tokens,
    rotate_refresh_token,
)
from service.errors import GrantRefused
from tests.hostile.conftest import Hostile
from tests.hostile.wire import Reply, check_answer, modern_body, modern_headers
from tests.hostile.world import Granted

SESSION_VERSION = "2025-11-25"


async def initialize(h: Hostile, token: str) -> str:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": SESSION_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "hostile", "version": "1"},
        },
    }
    reply = await h.mcp.post(json.dumps(body).encode(), _session_headers(token))
    assert reply.status == 200, reply.body[:300]
    session: str = reply.headers["Mcp-Session-Id"]
    return session


def _session_headers(token: str, session: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": SESSION_VERSION}
    return headers


async def session_call(h: Hostile, token: str, session: str, granted: Granted) -> Reply:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {
            "name": "get_workspace",
            "arguments": {"workspaceId": str(granted.workspaces[0])},
        },
    }
    reply = await h.mcp.post(json.dumps(body).encode(), _session_headers(token, session))
    check_answer(reply)
    return reply


def assert_refused(reply: Reply, error: str = "invalid_token", status: int = 401) -> None:
    check_answer(reply)
    assert reply.status == status, reply.body[:300]
    challenge = reply.headers["WWW-Authenticate"]
    assert challenge.startswith('Bearer resource_metadata="') and f'error="{error}"' in challenge
    assert "structuredContent" not in reply.body.decode()
    assert "TENANT-" not in reply.body.decode()


async def test_revoked_mid_session_is_refused_on_the_next_call(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    session = await initialize(hostile, a.token)
    ok = await session_call(hostile, a.token, session, a)
    assert ok.status == 200 and not ok.is_tool_error
    async with hostile.app[DB_POOL].acquire() as conn:
        await conn.execute("UPDATE approvals SET revoked_at = now() WHERE id = $1", a.approval_id)
    assert_refused(await session_call(hostile, a.token, session, a))
    assert_refused(await hostile.mcp.call(a.token, "get_many_workspaces", {}))
    # Other approvals of the same account are untouched.
    other = hostile.world.approvals["a1"]
    still = await hostile.mcp.call(other.token, "get_many_workspaces", {})
    assert still.status == 200 and not still.is_tool_error


async def test_approval_expired_mid_session_is_refused(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    session = await initialize(hostile, a.token)
    assert (await session_call(hostile, a.token, session, a)).status == 200
    async with hostile.app[DB_POOL].acquire() as conn:
        await conn.execute(
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1",
            a.approval_id,
        )
    assert_refused(await session_call(hostile, a.token, session, a))


async def _refresh(h: Hostile, granted: Granted, refresh_token: str) -> IssuedTokens | str:
    """What the token endpoint does for a refresh grant (operator clients have no redirect
    URI, so the rotation is called directly): new tokens, or the refusal text."""
    async with h.app[DB_POOL].acquire() as conn:
        try:
            return await rotate_refresh_token(
                conn, h.app[TOKENS], refresh_token, client_id=granted.approval.client_id
            )
        except GrantRefused as err:
            return err.message


async def test_refresh_replay_revokes_the_family_on_the_next_mcp_call(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    session = await initialize(hostile, a.token)
    first = await _refresh(hostile, a, a.refresh_token)
    assert isinstance(first, IssuedTokens), first
    fresh = first.access_token
    assert (await session_call(hostile, fresh, session, a)).status == 200
    # A thief replays the refresh token the client already used.
    replay = await _refresh(hostile, a, a.refresh_token)
    assert isinstance(replay, str) and "already used" in replay
    # Whoever holds the newer tokens loses them on the next call, in the session or not.
    assert_refused(await session_call(hostile, fresh, session, a))
    assert_refused(await hostile.mcp.call(fresh, "get_many_workspaces", {}))
    assert_refused(await hostile.mcp.call(a.token, "get_many_workspaces", {}))
    # ...and the newest refresh token buys nothing either.
    again = await _refresh(hostile, a, first.refresh_token)
    assert isinstance(again, str), again


async def test_token_in_the_query_string_of_mcp_is_refused(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    body = modern_body("tools/call", {"name": "get_many_workspaces", "arguments": {}})
    alone = modern_headers(None, "tools/call", "get_many_workspaces")
    url = f"/mcp?access_token={a.token}"
    assert_refused(await hostile.mcp.post(body, alone, url), error="invalid_request")
    # Beside a valid header too: a token in a URL ends up in logs and must not be honoured.
    both = modern_headers(a.token, "tools/call", "get_many_workspaces")
    assert_refused(await hostile.mcp.post(body, both, url), error="invalid_request")
    session = await initialize(hostile, a.token)
    body2 = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    reply = await hostile.mcp.post(body2, _session_headers(a.token, session), url)
    assert_refused(reply, error="invalid_request")


async def test_a_session_is_not_usable_with_another_approvals_token(hostile: Hostile) -> None:
    a, b, a1 = (hostile.world.approvals[k] for k in ("a", "b", "a1"))
    session = await initialize(hostile, a.token)
    for thief in (b, a1):
        reply = await session_call(hostile, thief.token, session, thief)
        assert reply.status == 404, reply.body[:300]
        assert "TENANT-" not in reply.body.decode()


async def test_reapproval_mid_session_refuses_the_older_generation(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    session = await initialize(hostile, a.token)
    assert (await session_call(hostile, a.token, session, a)).status == 200
    async with hostile.app[DB_POOL].acquire() as conn:
        newer = await grant_approval(
            conn,
            account_id=a.account_id,
            client_id=a.approval.client_id,
            workspace_ids=a.workspaces[:1],
            scopes="workspaces:read",
            expires="1d",
        )
        issued = await issue_tokens(conn, hostile.app[TOKENS], newer)
    assert newer.generation == a.approval.generation + 1
    assert_refused(await session_call(hostile, a.token, session, a))
    old_refresh = await _refresh(hostile, a, a.refresh_token)
    assert isinstance(old_refresh, str) and "newer approval" in old_refresh
    # The newer token sees only what the newer approval grants (scope and workspaces).
    narrowed = await hostile.mcp.call(issued.access_token, "get_many_workspaces", {})
    assert [w["id"] for w in narrowed.structured["workspaces"]] == [str(a.workspaces[0])]
    arguments = {"workspaceId": str(a.workspaces[0])}
    lacking = await hostile.mcp.call(issued.access_token, "get_many_instances", arguments)
    assert_refused(lacking, error="insufficient_scope", status=403)


async def test_deleted_account_membership_and_unknown_approval_tokens(hostile: Hostile) -> None:
    """A token whose approval row is gone, and one whose approval id never existed."""
    a = hostile.world.approvals["a"]
    tokens = hostile.app[TOKENS]
    ghost, _ = tokens.issue_access_token(
        account_id=a.account_id,
        client_id=a.approval.client_id,
        scopes=("workspaces:read", "n8n:read"),
        approval_id=uuid.uuid4(),
        generation=1,
    )
    assert_refused(await hostile.mcp.call(ghost, "get_many_workspaces", {}))
    forged, _ = tokens.issue_access_token(
        account_id=hostile.world.approvals["b"].account_id,  # B's account on A's approval
        client_id=a.approval.client_id,
        scopes=("workspaces:read", "n8n:read"),
        approval_id=a.approval_id,
        generation=a.approval.generation,
    )
    assert_refused(await hostile.mcp.call(forged, "get_many_workspaces", {}))
