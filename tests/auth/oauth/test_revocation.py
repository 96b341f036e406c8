"""Revocation: RFC 7009 for refresh and access tokens (each ends the approval's token
family), and the /approvals page where a person lists and revokes approvals."""

from __future__ import annotations

import re
import uuid

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, bearer, hidden, seed_account, tool_call


async def _mcp_status(oauth: OAuth, access_token: str) -> int:
    body, headers = tool_call("get_many_workspaces", {"limit": 5})
    resp = await oauth.http.post("/mcp", json=body, headers=bearer(headers, access_token))
    return resp.status


async def _tokens(oauth: OAuth, account: Account) -> tuple[dict[str, str], str]:
    got = await oauth.code_for(account)
    return await (await oauth.exchange(got)).json(), got["reg"].client_id


async def test_revoking_a_refresh_token_ends_the_family(oauth: OAuth, account: Account) -> None:
    tokens, client_id = await _tokens(oauth, account)
    resp = await oauth.http.post(
        "/revoke",
        data={
            "token": tokens["refresh_token"],
            "client_id": client_id,
            "token_type_hint": "refresh_token",
        },
    )
    assert resp.status == 200 and resp.headers["Cache-Control"] == "no-store"
    assert await _mcp_status(oauth, tokens["access_token"]) == 401
    refresh = await oauth.token(
        grant_type="refresh_token", refresh_token=tokens["refresh_token"], client_id=client_id
    )
    assert (await refresh.json())["error"] == "invalid_grant"


async def test_revoking_an_access_token_ends_the_family(oauth: OAuth, account: Account) -> None:
    tokens, client_id = await _tokens(oauth, account)
    resp = await oauth.http.post(
        "/revoke", data={"token": tokens["access_token"], "client_id": client_id}
    )
    assert resp.status == 200
    assert await _mcp_status(oauth, tokens["access_token"]) == 401
    reason = await oauth.pool.fetchval(
        "SELECT revoked_reason FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    assert reason == "client"


async def test_unknown_tokens_get_200_and_other_clients_are_refused(
    oauth: OAuth, account: Account
) -> None:
    tokens, client_id = await _tokens(oauth, account)
    ok = await oauth.http.post("/revoke", data={"token": "no-such-token", "client_id": client_id})
    assert ok.status == 200
    other = await oauth.register()
    refused = await oauth.http.post(
        "/revoke", data={"token": tokens["refresh_token"], "client_id": other.client_id}
    )
    assert refused.status == 400
    assert await _mcp_status(oauth, tokens["access_token"]) == 200
    unknown = await oauth.http.post("/revoke", data={"token": "x", "client_id": "dyn_nobody"})
    assert unknown.status == 401 and (await unknown.json())["error"] == "invalid_client"
    hint = await oauth.http.post(
        "/revoke", data={"token": "x", "client_id": client_id, "token_type_hint": "id_token"}
    )
    assert (await hint.json())["error"] == "unsupported_token_type"


async def test_approvals_page_lists_and_revokes(oauth: OAuth, account: Account) -> None:
    tokens, _ = await _tokens(oauth, account)
    page = await oauth.http.get("/approvals")
    html = await page.text()
    assert page.status == 200 and "Test Agent" in html and "127.0.0.1:53682" in html
    assert "frame-ancestors 'none'" in page.headers["Content-Security-Policy"]
    assert set(dict(hidden(html))) == {"csrf"}  # form 0 is sign-out; Revoke is a link
    link = re.search(r'href="(/approvals/revoke\?approval=[^"]+)"', html)
    assert link is not None
    confirm_path = link[1]
    confirm = await oauth.http.get(confirm_path)
    assert confirm.status == 200 and "Revoke" in await confirm.text()
    assert await _mcp_status(oauth, tokens["access_token"]) == 200  # asking is not revoking
    fields = dict(hidden(await confirm.text(), index=1))  # form 0 is sign-out
    assert set(fields) == {"csrf", "approval_id"}
    no_csrf = await oauth.http.post(
        "/approvals/revoke", data={"approval_id": fields["approval_id"]}, allow_redirects=False
    )
    assert no_csrf.status == 403
    assert await _mcp_status(oauth, tokens["access_token"]) == 200
    done = await oauth.http.post("/approvals/revoke", data=fields, allow_redirects=False)
    assert done.status == 303 and done.headers["Location"] == "/approvals?revoked=1"
    assert await _mcp_status(oauth, tokens["access_token"]) == 401  # the very next call
    after = await (await oauth.http.get("/approvals?revoked=1")).text()
    assert "was revoked" in after and "No active approvals" in after


async def test_another_accounts_approval_cannot_be_revoked(oauth: OAuth, account: Account) -> None:
    victim = await seed_account(oauth.pool, workspaces=1)
    tokens, _ = await _tokens(oauth, victim)
    approval_id = await oauth.pool.fetchval(
        "SELECT id FROM approvals WHERE account_id = $1", uuid.UUID(victim.id)
    )
    oauth.http.session.cookie_jar.clear()
    await oauth.signin(account)
    page = await oauth.http.get("/approvals")
    csrf = dict(hidden(await page.text()))["csrf"]
    resp = await oauth.http.post(
        "/approvals/revoke",
        data={"csrf": csrf, "approval_id": str(approval_id)},
        allow_redirects=False,
    )
    assert resp.status == 404
    assert await _mcp_status(oauth, tokens["access_token"]) == 200


async def test_approvals_page_needs_a_session(oauth: OAuth) -> None:
    resp = await oauth.http.get("/approvals", allow_redirects=False)
    assert resp.status == 303 and resp.headers["Location"] == "/signin?next=%2Fapprovals"
