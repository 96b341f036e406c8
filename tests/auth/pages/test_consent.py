"""The approval form's POST: every bound enforced by the server, CSRF, deny, the 100-active
cap, and re-approval bumping the generation."""

from __future__ import annotations

import uuid

from service.auth.approvals import create_operator_client, grant_approval
from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, authorize_params, pkce, query_of, seed_account


async def _approvals(oauth: OAuth, account: Account) -> int:
    return int(
        await oauth.pool.fetchval(
            "SELECT count(*) FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
        )
    )


async def _ready(oauth: OAuth, account: Account) -> dict[str, str]:
    reg = await oauth.register()
    _, challenge = pkce()
    assert (await oauth.signin(account)).status == 303
    return authorize_params(reg, challenge, oauth.resource)


async def test_csrf_token_missing_or_wrong_is_refused(oauth: OAuth, account: Account) -> None:
    params = await _ready(oauth, account)
    for csrf in (None, "forged-token"):
        resp = await oauth.decide(params, workspaces=account.workspaces[:1], csrf=csrf)
        assert resp.status == 403
        assert "Location" not in resp.headers
        assert "form expired" in await resp.text()
    assert await _approvals(oauth, account) == 0


async def test_51_workspaces_are_refused(oauth: OAuth) -> None:
    acc = await seed_account(oauth.pool, workspaces=51)
    params = await _ready(oauth, acc)
    resp = await oauth.decide(params, workspaces=acc.workspaces)
    assert resp.status == 400
    assert "at most 50 workspaces, not 51" in await resp.text()
    assert await _approvals(oauth, acc) == 0
    ok = await oauth.decide(params, workspaces=acc.workspaces[:50])
    assert ok.status == 303


async def test_workspace_the_account_is_not_a_member_of(oauth: OAuth, account: Account) -> None:
    other = await seed_account(oauth.pool, workspaces=1)
    params = await _ready(oauth, account)
    resp = await oauth.decide(params, workspaces=[account.workspaces[0], other.workspaces[0]])
    assert resp.status == 400
    assert "not a member of workspace" in await resp.text()
    for bad in ([], ["not-a-uuid"], [str(uuid.uuid4())]):
        resp = await oauth.decide(params, workspaces=bad)
        assert resp.status == 400
    assert await _approvals(oauth, account) == 0


async def test_expiry_and_scope_choices_are_bounded(oauth: OAuth, account: Account) -> None:
    params = await _ready(oauth, account)
    resp = await oauth.decide(params, workspaces=account.workspaces[:1], expires="365d")
    assert resp.status == 400 and "not offered" in await resp.text()
    narrow = {**params, "scope": "workspaces:read"}
    resp = await oauth.decide(narrow, workspaces=account.workspaces[:1], scopes=["n8n:read"])
    assert resp.status == 400 and "did not ask for n8n:read" in await resp.text()
    resp = await oauth.decide(narrow, workspaces=account.workspaces[:1], scopes=[])
    assert resp.status == 400 and "at least one permission" in await resp.text()
    assert await _approvals(oauth, account) == 0


async def test_expiry_and_scopes_chosen_are_what_is_granted(oauth: OAuth, account: Account) -> None:
    params = await _ready(oauth, account)
    resp = await oauth.decide(
        params, workspaces=account.workspaces[:2], scopes=["workspaces:read"], expires="30d"
    )
    assert resp.status == 303
    row = await oauth.pool.fetchrow(
        "SELECT scopes, expires_at - now() AS left FROM approvals WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    assert list(row["scopes"]) == ["workspaces:read"]
    assert 29.9 < row["left"].total_seconds() / 86400 <= 30


async def test_deny_goes_back_with_access_denied(oauth: OAuth, account: Account) -> None:
    params = await _ready(oauth, account)
    resp = await oauth.decide(params, workspaces=account.workspaces[:1], decision="deny")
    assert resp.status == 303
    answer = query_of(resp.headers["Location"])
    assert answer["error"] == "access_denied"
    assert answer["state"] == params["state"] and answer["iss"] == oauth.cfg.issuer
    assert await _approvals(oauth, account) == 0


async def test_the_101st_approval_is_refused_with_a_way_out(oauth: OAuth, account: Account) -> None:
    async with oauth.pool.acquire() as conn:
        for _ in range(100):
            client = await create_operator_client(conn, "filler")
            await grant_approval(
                conn,
                account_id=uuid.UUID(account.id),
                client_id=client,
                workspace_ids=[uuid.UUID(account.workspaces[0])],
                scopes="workspaces:read",
                expires="1d",
            )
    params = await _ready(oauth, account)
    page, html = await oauth.approval_page(params)
    assert "100 active approvals" in html and 'href="/approvals"' in html
    resp = await oauth.decide(params, workspaces=account.workspaces[:1])
    assert resp.status == 409
    text = await resp.text()
    assert "Revoke one you no longer need on the Approvals page" in text
    assert 'href="/approvals"' in text
    assert await _approvals(oauth, account) == 100


async def test_approving_again_updates_the_approval_and_its_generation(
    oauth: OAuth, account: Account
) -> None:
    got = await oauth.code_for(account)
    first = await (await oauth.exchange(got)).json()
    row = await oauth.pool.fetchrow(
        "SELECT id, generation FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    assert row["generation"] == 1
    _, challenge = pkce()
    params = authorize_params(got["reg"], challenge, oauth.resource)
    page, html = await oauth.approval_page(params)
    assert "You approved this application before" in html
    resp = await oauth.decide(params, workspaces=account.workspaces[1:3])
    assert resp.status == 303
    again = await oauth.pool.fetchrow(
        "SELECT id, generation FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
    )
    assert again["id"] == row["id"] and again["generation"] == 2
    stale = await oauth.refresh(got, first["refresh_token"])
    assert (await stale.json())["error"] == "invalid_grant"
