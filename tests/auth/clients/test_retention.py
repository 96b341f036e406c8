"""Retention of unused clients against the running app: the sweep (every 0.2 s here)
deletes a registered client and a metadata-document client that never completed an
authorization once past the retention, keeps one that did, keeps fresh ones, and two
sweepers at once share the work; an approval whose client was swept meanwhile gets a page,
not an error."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import METRICS
from service.auth.clients.retention import sweep_unused_clients
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.clients.test_metadata_documents import DocumentServer, docs  # noqa: F401 - the fixture
from tests.auth.flow import Registered, authorize_params, pkce, seed_account
from tests.auth.helpers import ClientFactory
from tests.support.services import TestDatabase

AGED = "now() - interval '169 hours'"


@pytest.fixture
async def swept(aiohttp_client: ClientFactory, make_config: Callable[..., Config]) -> OAuth:
    cfg = make_config(OAUTH_CLIENT_SWEEP_SECONDS="0.2", OAUTH_CIMD_ALLOW_PRIVATE="true")
    client: TestClient[web.Request, web.Application] = await aiohttp_client(create_app(cfg))
    return OAuth(client, cfg)


async def exists(pool: asyncpg.Pool, client_id: str) -> bool:
    found = await pool.fetchval("SELECT true FROM oauth_clients WHERE client_id = $1", client_id)
    return bool(found)


async def age(pool: asyncpg.Pool, client_id: str) -> None:
    await pool.execute(
        f"UPDATE oauth_clients SET created_at = {AGED},"
        f" document_fetched_at = CASE WHEN kind = 'metadata' THEN {AGED} END"
        " WHERE client_id = $1",
        client_id,
    )


async def until_gone(pool: asyncpg.Pool, client_id: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while await exists(pool, client_id):
        assert time.monotonic() < deadline, f"{client_id} was not swept"
        await asyncio.sleep(0.05)


def removed(oauth: OAuth, kind: str) -> float:
    value = oauth.http.app[METRICS].registry.get_sample_value(
        "elova_mcp_unused_clients_removed_total", {"kind": kind}
    )
    return value or 0.0


async def test_an_unused_registered_client_is_deleted_and_a_used_one_kept(
    swept: OAuth,
) -> None:
    account = await seed_account(swept.pool, workspaces=1)
    unused = await swept.register()
    fresh = await swept.register()
    got = await swept.code_for(account)  # registers a client and completes an authorization
    tokens = await swept.exchange(got)
    assert tokens.status == 200, await tokens.text()
    used = got["reg"].client_id
    assert await swept.pool.fetchval(
        "SELECT authorized_at IS NOT NULL FROM oauth_clients WHERE client_id = $1", used
    )
    for client_id in (unused.client_id, used):
        await age(swept.pool, client_id)
    await until_gone(swept.pool, unused.client_id)
    assert await exists(swept.pool, used)
    assert await exists(swept.pool, fresh.client_id)
    assert removed(swept, "dynamic") >= 1
    # The used client still works: its refresh token is honoured.
    refreshed = await swept.refresh(got, (await tokens.json())["refresh_token"])
    assert refreshed.status == 200, await refreshed.text()
    # The deleted one is an unknown client now (clients register again on that answer).
    answer = await swept.token(
        grant_type="refresh_token", refresh_token="x" * 43, client_id=unused.client_id
    )
    assert answer.status == 401 and (await answer.json())["error"] == "invalid_client"


async def test_an_unused_metadata_client_is_deleted_and_an_approved_one_kept(
    swept: OAuth,
    docs: DocumentServer,  # noqa: F811
) -> None:
    account = await seed_account(swept.pool, workspaces=1)
    await swept.signin(account)
    _, challenge = pkce()
    # One document client is only looked at (its row is written by the fetch) ...
    looked = Registered(docs.base + "/elsewhere.json", "http://127.0.0.1/callback", {})
    docs.body = {**docs.document(), "client_id": looked.client_id}
    page, html = await swept.approval_page(authorize_params(looked, challenge, swept.resource))
    assert page.status == 200, html
    # ... the other is approved.
    docs.body = None
    approved = Registered(docs.url, "http://127.0.0.1:61234/callback", {})
    got = await swept.code_for(account, approved)
    assert (await swept.exchange(got)).status == 200
    for client_id in (looked.client_id, approved.client_id):
        await age(swept.pool, client_id)
    await until_gone(swept.pool, looked.client_id)
    assert await exists(swept.pool, approved.client_id)
    assert removed(swept, "metadata") >= 1


async def test_an_approval_whose_client_was_swept_meanwhile_gets_a_page(
    swept: OAuth,
    docs: DocumentServer,  # noqa: F811
) -> None:
    """The replica still has the document cached when the row goes: the approval POST says
    the registration is gone (no foreign-key error, nothing granted), and the next visit
    fetches the document again."""
    account = await seed_account(swept.pool, workspaces=1)
    reg = Registered(docs.url, "http://127.0.0.1/callback", {})
    await swept.signin(account)
    _, challenge = pkce()
    params = authorize_params(reg, challenge, swept.resource)
    page, html = await swept.approval_page(params)
    assert page.status == 200, html
    await swept.pool.execute("DELETE FROM oauth_clients WHERE client_id = $1", docs.url)
    resp = await swept.decide(params, workspaces=account.workspaces)
    # decide() loads the page first: the cached client shows it; the POST finds no row.
    assert resp.status == 400, await resp.text()
    assert "no longer registered" in await resp.text()
    assert not await exists(swept.pool, docs.url)
    fetches = docs.fetches
    again, html = await swept.approval_page(params)
    assert again.status == 200, html
    assert docs.fetches == fetches + 1 and await exists(swept.pool, docs.url)


async def test_two_sweepers_at_once_share_the_work(test_database: TestDatabase) -> None:
    marker = f"sweep-{secrets.token_hex(4)}-"
    pools = [await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=2) for _ in range(2)]
    try:
        await pools[0].execute(
            "INSERT INTO oauth_clients (client_id, client_name, redirect_uris, kind, created_at)"
            f" SELECT $1 || g, 'aged', '{{https://a.example/cb}}', 'dynamic', {AGED}"
            " FROM generate_series(1, 1200) g",
            marker,
        )
        results = await asyncio.gather(*(sweep_unused_clients(p, 168) for p in pools))
        assert sum(r["dynamic"] for r in results) >= 1200
        left = await pools[0].fetchval(
            "SELECT count(*) FROM oauth_clients WHERE client_id LIKE $1 || '%'", marker
        )
        assert left == 0
    finally:
        for pool in pools:
            await pool.close()
