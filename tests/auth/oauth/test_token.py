"""The token endpoint: code exchange bound to client, redirect URI, PKCE verifier and
resource, single use (a reuse revokes what the code issued), short-lived; refresh rotation
that never extends the approval; OAuth JSON errors that are never cached."""

from __future__ import annotations

import time
import uuid
from typing import Any

import jwt
import pytest

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, bearer, tool_call


async def _mcp_status(oauth: OAuth, access_token: str) -> int:
    body, headers = tool_call("get_many_workspaces", {"limit": 5})
    resp = await oauth.http.post("/mcp", json=body, headers=bearer(headers, access_token))
    return resp.status


async def _error(resp: Any) -> str:
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["error_description"]
    return str(body["error"])


async def test_tokens_are_short_lived_and_bound_to_the_resource(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account)
    resp = await oauth.exchange(got)
    assert resp.status == 200 and resp.headers["Pragma"] == "no-cache"
    tokens = await resp.json()
    claims = jwt.decode(tokens["access_token"], options={"verify_signature": False})
    assert claims["aud"] == oauth.resource and claims["iss"] == oauth.cfg.issuer
    assert claims["exp"] - claims["iat"] <= 300 and tokens["expires_in"] <= 300
    assert claims["client_id"] == got["reg"].client_id
    assert await _mcp_status(oauth, tokens["access_token"]) == 200


async def test_wrong_pkce_verifier(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    for verifier in (
        "x" * 43,
        "short",
        got["verifier"][:-1] + ("A" if got["verifier"][-1] != "A" else "B"),
    ):
        resp = await oauth.exchange(got, code_verifier=verifier)
        assert resp.status == 400 and await _error(resp) == "invalid_grant"
    resp = await oauth.exchange(got, code_verifier="")
    assert await _error(resp) == "invalid_request"


async def test_reused_code_is_refused_and_revokes_what_it_issued(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account)
    first = await (await oauth.exchange(got)).json()
    assert await _mcp_status(oauth, first["access_token"]) == 200
    again = await oauth.exchange(got)
    assert again.status == 400 and await _error(again) == "invalid_grant"
    assert "already used" in (await again.json())["error_description"]
    assert await _mcp_status(oauth, first["access_token"]) == 401
    refresh = await oauth.refresh(got, first["refresh_token"])
    assert await _error(refresh) == "invalid_grant"
    reason = await oauth.pool.fetchval(
        "SELECT revoked_reason FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    assert reason == "code_reuse"


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"redirect_uri": "http://127.0.0.1:53682/other"}, "invalid_grant"),
        ({"resource": "https://other.example/mcp"}, "invalid_target"),
        ({"code": "not-a-code"}, "invalid_grant"),
        ({"grant_type": "password"}, "unsupported_grant_type"),
        ({"client_id": "dyn_unknown"}, "invalid_client"),
        ({"code": ""}, "invalid_request"),
    ],
)
async def test_mismatched_exchange_is_refused_and_leaves_the_code_usable(
    oauth: OAuth, account: Account, over: dict[str, str], error: str
) -> None:
    got = await oauth.code_for(account)
    resp = await oauth.exchange(got, **over)
    assert resp.status in (400, 401) and await _error(resp) == error
    assert (await oauth.exchange(got)).status == 200


async def test_code_of_another_client(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    other = await oauth.register()
    resp = await oauth.exchange(got, client_id=other.client_id)
    assert await _error(resp) == "invalid_grant"


async def test_expired_code(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    await oauth.pool.execute(
        "UPDATE authorization_codes SET expires_at = now() - interval '1 second'"
        " WHERE approval_id IN (SELECT id FROM approvals WHERE account_id = $1)",
        uuid.UUID(account.id),
    )
    resp = await oauth.exchange(got)
    assert await _error(resp) == "invalid_grant"
    assert "expired" in (await resp.json())["error_description"]


async def test_codes_live_at_most_a_minute(oauth: OAuth, account: Account) -> None:
    await oauth.code_for(account)
    life = await oauth.pool.fetchval(
        "SELECT expires_at - created_at FROM authorization_codes"
        " WHERE approval_id IN (SELECT id FROM approvals WHERE account_id = $1)",
        uuid.UUID(account.id),
    )
    assert life.total_seconds() <= 60


async def test_form_encoding_is_required(oauth: OAuth) -> None:
    resp = await oauth.http.post("/token", json={"grant_type": "authorization_code"})
    assert resp.status == 400 and await _error(resp) == "invalid_request"


async def test_refresh_rotates_and_never_extends_the_approval(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account)
    tokens = await (await oauth.exchange(got)).json()
    expires = await oauth.pool.fetchval(
        "SELECT expires_at FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    seen = {tokens["refresh_token"]}
    for _ in range(3):
        resp = await oauth.refresh(got, tokens["refresh_token"], resource=oauth.resource)
        assert resp.status == 200
        tokens = await resp.json()
        assert tokens["refresh_token"] not in seen
        seen.add(tokens["refresh_token"])
        assert await _mcp_status(oauth, tokens["access_token"]) == 200
    after = await oauth.pool.fetchval(
        "SELECT expires_at FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    assert after == expires


async def test_refresh_refusals_that_do_not_spend_the_token(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account, scope="workspaces:read")
    tokens = await (await oauth.exchange(got)).json()
    base = {
        "grant_type": "refresh_token",
        "refresh_token": tokens["refresh_token"],
        "client_id": got["reg"].client_id,
    }
    wider = await oauth.token(**base, scope="workspaces:read n8n:read")
    assert await _error(wider) == "invalid_scope"
    target = await oauth.token(**{**base, "resource": "https://other.example/mcp"})
    assert await _error(target) == "invalid_target"
    other = await oauth.register()
    stolen = await oauth.token(**{**base, "client_id": other.client_id})
    assert await _error(stolen) == "invalid_grant"
    same = await oauth.token(**base, scope="workspaces:read")
    assert same.status == 200


async def test_expired_approval(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    tokens = await (await oauth.exchange(got)).json()
    await oauth.pool.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    resp = await oauth.refresh(got, tokens["refresh_token"])
    assert await _error(resp) == "invalid_grant"
    assert "expired" in (await resp.json())["error_description"]
    assert await _mcp_status(oauth, tokens["access_token"]) == 401


async def test_access_token_never_outlives_the_approval(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    tokens = await (await oauth.exchange(got)).json()
    await oauth.pool.execute(
        "UPDATE approvals SET expires_at = now() + interval '90 seconds' WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    resp = await oauth.refresh(got, tokens["refresh_token"])
    fresh = await resp.json()
    assert fresh["expires_in"] <= 90
    claims = jwt.decode(fresh["access_token"], options={"verify_signature": False})
    assert claims["exp"] <= time.time() + 91
