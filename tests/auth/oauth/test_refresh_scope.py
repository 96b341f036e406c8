"""A narrower `scope` at refresh (RFC 6749 §6, issue 21): the new access token carries only
that scope and the answer says so; a scope the approval does not grant is `invalid_scope`
and leaves the refresh token unspent; the rotated refresh token keeps the approval's full
scope, so a later refresh without `scope` gets every scope back."""

from __future__ import annotations

from typing import Any

import jwt

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, bearer, tool_call

BOTH = "n8n:read workspaces:read"


async def _tool_status(oauth: OAuth, token: str, tool: str, arguments: dict[str, Any]) -> int:
    body, headers = tool_call(tool, arguments)
    resp = await oauth.http.post("/mcp", json=body, headers=bearer(headers, token))
    if resp.status == 403:
        assert 'error="insufficient_scope"' in resp.headers["WWW-Authenticate"]
    return resp.status


def _scope_claim(access_token: str) -> str:
    claims = jwt.decode(access_token, options={"verify_signature": False})
    return str(claims["scope"])


async def _tokens(resp: Any) -> dict[str, Any]:
    assert resp.status == 200, await resp.text()
    document: dict[str, Any] = await resp.json()
    return document


async def test_a_narrower_scope_gives_a_narrower_access_token(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account)
    first = await _tokens(await oauth.exchange(got))
    assert first["scope"] == BOTH
    workspace = {"workspaceId": account.workspaces[0]}

    narrow = await _tokens(
        await oauth.refresh(got, first["refresh_token"], scope="workspaces:read")
    )
    assert narrow["scope"] == "workspaces:read"
    assert _scope_claim(narrow["access_token"]) == "workspaces:read"
    assert await _tool_status(oauth, narrow["access_token"], "get_workspace", workspace) == 200
    assert await _tool_status(oauth, narrow["access_token"], "get_many_instances", workspace) == 403

    # the rotated refresh token still holds the approval's whole scope
    full = await _tokens(await oauth.refresh(got, narrow["refresh_token"]))
    assert full["scope"] == BOTH and _scope_claim(full["access_token"]) == BOTH
    assert await _tool_status(oauth, full["access_token"], "get_many_instances", workspace) == 200

    other = await _tokens(await oauth.refresh(got, full["refresh_token"], scope="n8n:read"))
    assert other["scope"] == "n8n:read"
    assert await _tool_status(oauth, other["access_token"], "get_many_instances", workspace) == 200
    assert await _tool_status(oauth, other["access_token"], "get_workspace", workspace) == 403

    same = await _tokens(await oauth.refresh(got, other["refresh_token"], scope=f" {BOTH} "))
    assert same["scope"] == BOTH


async def test_a_wider_or_unknown_scope_is_invalid_scope_and_spends_nothing(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account, scope="workspaces:read")
    tokens = await _tokens(await oauth.exchange(got))
    refresh = tokens["refresh_token"]
    for asked in (
        "workspaces:read n8n:read",
        "n8n:read",
        "admin",
        "workspaces:read workspaces:write",
    ):
        resp = await oauth.refresh(got, refresh, scope=asked)
        assert resp.status == 400
        body = await resp.json()
        assert body["error"] == "invalid_scope", body
        assert "workspaces:read" in body["error_description"]
    # the refusals left the refresh token unused: it still refreshes, once
    assert (await _tokens(await oauth.refresh(got, refresh)))["scope"] == "workspaces:read"


async def test_a_blank_scope_asks_for_the_approval_scope(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    tokens = await _tokens(await oauth.exchange(got))
    again = await _tokens(await oauth.refresh(got, tokens["refresh_token"], scope=" "))
    assert again["scope"] == BOTH and _scope_claim(again["access_token"]) == BOTH


async def test_another_clients_token_is_invalid_grant_before_any_scope_is_judged(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account, scope="workspaces:read")
    tokens = await _tokens(await oauth.exchange(got))
    other = await oauth.register()
    resp = await oauth.token(
        grant_type="refresh_token",
        refresh_token=tokens["refresh_token"],
        client_id=other.client_id,
        scope="n8n:read",
    )
    body = await resp.json()
    assert resp.status == 400 and body["error"] == "invalid_grant"
    assert "workspaces:read" not in body["error_description"]
