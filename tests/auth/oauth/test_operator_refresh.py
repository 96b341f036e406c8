"""Refresh tokens printed by `elova-mcp approve` work at the token endpoint, rotating like any
other; the operator client can refresh but never take part in the browser flow."""

from __future__ import annotations

from service.auth.approvals import approval_client_id
from service.cli.approve import approve
from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account


async def test_operator_refresh_token_rotates(oauth: OAuth, account: Account) -> None:
    issued = await approve(
        oauth.pool, oauth.cfg, account=account.email, workspaces=account.workspaces[:1]
    )
    client_id = await approval_client_id(oauth.pool, issued.approval_id)
    form = {"grant_type": "refresh_token", "client_id": client_id}
    resp = await oauth.token(**form, refresh_token=issued.refresh_token)
    assert resp.status == 200, await resp.text()
    tokens = await resp.json()
    assert tokens["refresh_token"] != issued.refresh_token and tokens["expires_in"] <= 300
    # Rotation: the printed token worked once; presenting it again revokes the family.
    again = await oauth.token(**form, refresh_token=issued.refresh_token)
    assert again.status == 400 and (await again.json())["error"] == "invalid_grant"
    later = await oauth.token(**form, refresh_token=tokens["refresh_token"])
    assert later.status == 400


async def test_operator_client_cannot_exchange_a_code(oauth: OAuth, account: Account) -> None:
    issued = await approve(
        oauth.pool, oauth.cfg, account=account.email, workspaces=account.workspaces[:1]
    )
    client_id = await approval_client_id(oauth.pool, issued.approval_id)
    resp = await oauth.token(
        grant_type="authorization_code",
        client_id=client_id,
        code="x" * 43,
        code_verifier="y" * 43,
        redirect_uri="http://127.0.0.1:1/cb",
    )
    assert resp.status == 401 and (await resp.json())["error"] == "invalid_client"
