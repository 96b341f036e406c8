"""The whole flow over HTTP against the real app: register, sign in, approve, exchange,
call /mcp, refresh."""

from __future__ import annotations

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account


async def test_code_exchange_and_refresh(oauth: OAuth, account: Account) -> None:
    got = await oauth.code_for(account)
    resp = await oauth.exchange(got)
    assert resp.status == 200, await resp.text()
    assert resp.headers["Cache-Control"] == "no-store"
    tokens = await resp.json()
    assert tokens["token_type"] == "Bearer"
    assert 0 < tokens["expires_in"] <= 300
    assert tokens["scope"] == "n8n:read workspaces:read"
    again = await oauth.refresh(got, tokens["refresh_token"])
    assert again.status == 200, await again.text()
