"""Sign-in: the session cookie, idle and absolute expiry, login CSRF, safe `next`, and the
failed sign-in throttle per account and per address (kept in PostgreSQL)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from service.app import create_app
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, authorize_params, hidden, pkce, seed_account
from tests.auth.helpers import ClientFactory


@pytest.fixture
async def clean_throttle(oauth: OAuth) -> AsyncIterator[None]:
    # Every test client signs in from 127.0.0.1: leave no address failures to later tests.
    yield
    await oauth.pool.execute("DELETE FROM signin_throttle")
    await oauth.pool.execute("DELETE FROM signin_pairs")


async def test_session_cookie_attributes(oauth: OAuth, account: Account) -> None:
    resp = await oauth.signin(account)
    assert resp.status == 303 and resp.headers["Location"] == "/approvals"
    cookie = next(c for c in resp.headers.getall("Set-Cookie") if c.startswith("elova_session="))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie  # http public URL
    stored = await oauth.pool.fetchrow(
        "SELECT expires_at - created_at AS life FROM signin_sessions WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    assert stored["life"].days == 30


async def test_https_public_url_makes_the_cookie_secure(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> None:
    cfg = make_config(PUBLIC_URL="https://mcp.example.com")
    client = await aiohttp_client(create_app(cfg))
    oauth = OAuth(client, cfg)
    acc = await seed_account(oauth.pool, workspaces=1)
    page = await client.get("/signin")
    form_cookie = next(
        c for c in page.headers.getall("Set-Cookie") if c.startswith("__Host-elova_signin=")
    )
    assert "Secure" in form_cookie and "HttpOnly" in form_cookie
    csrf = dict(hidden(await page.text()))["csrf"]
    # The test client speaks plain http, so it would not send a Secure cookie by itself.
    resp = await client.post(
        "/signin",
        data={"csrf": csrf, "next": "/approvals", "email": acc.email, "password": acc.password},
        headers={"Cookie": f"__Host-elova_signin={csrf}"},
        allow_redirects=False,
    )
    assert resp.status == 303
    cookies = resp.headers.getall("Set-Cookie")
    session = next(c for c in cookies if c.startswith("__Host-elova_session="))
    assert "Secure" in session and "HttpOnly" in session and "SameSite=Lax" in session


async def _authorize_status(oauth: OAuth, params: dict[str, str]) -> int:
    resp, _ = await oauth.approval_page(params)
    return resp.status


@pytest.mark.parametrize(
    "expire",
    [
        "UPDATE signin_sessions SET last_seen_at = now() - interval '31 minutes'"
        " WHERE account_id = $1",
        "UPDATE signin_sessions SET expires_at = now() - interval '1 second' WHERE account_id = $1",
    ],
    ids=["idle", "absolute"],
)
async def test_idle_and_expired_sessions_end(oauth: OAuth, account: Account, expire: str) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource)
    await oauth.signin(account)
    resp, html = await oauth.approval_page(params)
    assert resp.status == 200
    fields = hidden(html) + [("workspace", account.workspaces[0]), ("grant_scope", "n8n:read")]
    fields += [("expires", "1d"), ("decision", "approve")]
    await oauth.pool.execute(expire, uuid.UUID(account.id))
    assert await _authorize_status(oauth, params) == 303  # back to sign-in
    posted = await oauth.http.post("/authorize", data=fields, allow_redirects=False)
    assert posted.status == 303 and posted.headers["Location"].startswith("/signin?")
    assert (
        await oauth.pool.fetchval(
            "SELECT count(*) FROM approvals WHERE account_id = $1", uuid.UUID(account.id)
        )
        == 0
    )
    page = await oauth.http.get("/approvals", allow_redirects=False)
    assert page.status == 303


async def test_activity_keeps_an_idle_session_alive(oauth: OAuth, account: Account) -> None:
    await oauth.signin(account)
    await oauth.pool.execute(
        "UPDATE signin_sessions SET last_seen_at = now() - interval '29 minutes'"
        " WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    assert (await oauth.http.get("/approvals", allow_redirects=False)).status == 200
    seen = await oauth.pool.fetchval(
        "SELECT now() - last_seen_at FROM signin_sessions WHERE account_id = $1",
        uuid.UUID(account.id),
    )
    assert seen.total_seconds() < 5


async def test_wrong_password_and_unknown_email(
    oauth: OAuth, account: Account, clean_throttle: None
) -> None:
    for email in (account.email, "nobody@example.test"):
        bad = Account(account.id, email, "wrong password", [])
        resp = await oauth.signin(bad)
        assert resp.status == 401
        assert "not correct" in await resp.text()
        assert not any(
            c.startswith("elova_session=") for c in resp.headers.getall("Set-Cookie", [])
        )


async def test_signin_csrf_missing_is_refused(oauth: OAuth, account: Account) -> None:
    resp = await oauth.http.post(
        "/signin",
        data={"email": account.email, "password": account.password},
        allow_redirects=False,
    )
    assert resp.status == 403
    assert (
        await oauth.pool.fetchval(
            "SELECT count(*) FROM signin_sessions WHERE account_id = $1", uuid.UUID(account.id)
        )
        == 0
    )


@pytest.mark.parametrize(
    "next_path",
    [
        "https://evil.example/",
        "//evil.example/x",
        "/\\evil.example",
        "/token",
        "javascript:alert(1)",
    ],
)
async def test_next_never_leaves_this_server(
    oauth: OAuth, account: Account, next_path: str
) -> None:
    resp = await oauth.signin(account, next_path)
    assert resp.status == 303
    assert resp.headers["Location"] == "/approvals"


async def test_failed_signins_slow_down_the_account_and_address_pair(
    oauth: OAuth, account: Account, clean_throttle: None
) -> None:
    wrong = Account(account.id, account.email.upper(), "nope", [])
    settings = oauth.cfg.signin_throttle
    for _ in range(settings.free_failures + 1):
        assert (await oauth.signin(wrong)).status == 401
    resp = await oauth.signin(account)  # the right password, too soon
    assert resp.status == 429
    assert 0 < int(resp.headers["Retry-After"]) <= settings.first_delay_seconds
    assert "Too many failed sign-ins. Try again in" in await resp.text()
    # The wait passes (as another replica would see it: the state is in PostgreSQL).
    await oauth.pool.execute(
        "UPDATE signin_pairs SET last_failure_at = now() - interval '16 minutes'"
    )
    assert (await oauth.signin(account)).status == 303


async def test_failed_signins_are_throttled_per_address(
    oauth: OAuth, account: Account, clean_throttle: None
) -> None:
    for i in range(oauth.cfg.signin_throttle.address_failures):
        stranger = Account("", f"guess{i}-{uuid.uuid4().hex[:6]}@example.test", "nope", [])
        assert (await oauth.signin(stranger)).status == 401
    resp = await oauth.signin(account)
    assert resp.status == 429


async def test_signout_ends_the_session(oauth: OAuth, account: Account) -> None:
    await oauth.signin(account)
    page = await oauth.http.get("/approvals")
    csrf = dict(hidden(await page.text()))["csrf"]
    resp = await oauth.http.post("/signout", data={"csrf": csrf}, allow_redirects=False)
    assert resp.status == 303
    assert (
        await oauth.pool.fetchval(
            "SELECT count(*) FROM signin_sessions WHERE account_id = $1", uuid.UUID(account.id)
        )
        == 0
    )
