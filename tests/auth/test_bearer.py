"""The bearer check against live approvals: revocation, expiry, re-approval and lost
memberships take effect on the next call; a database outage is 503-retryable, not a 500."""

from __future__ import annotations

import socket

import asyncpg
import pytest
from aiohttp import web

from service.auth.approvals import revoke_approval
from service.auth.bearer import challenge
from service.auth.tokens import TokenService
from service.config import Config
from service.errors import AuthError, InsufficientScope
from tests.auth.helpers import AuthApp, ClientFactory, SeedFn, build_app, unbacked_token
from tests.support.approvals import granted


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_caller_carries_the_eligible_set_and_roles(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(3, role="admin")
    approval, issued = await granted(
        db_pool, tokens, who, scopes="n8n:read", workspaces=who.workspaces[:2]
    )
    resp = await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))
    assert resp.status == 200
    body = await resp.json()
    assert body["account"] == str(who.account_id)
    assert body["generation"] == 1
    assert body["scopes"] == ["n8n:read"]
    assert body["eligible"] == {str(w): "admin" for w in who.workspaces[:2]}


async def test_membership_changes_apply_on_the_next_call(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(2)
    _, issued = await granted(db_pool, tokens, who)
    lost, kept = who.workspaces
    await db_pool.execute(
        "DELETE FROM memberships WHERE account_id = $1 AND workspace_id = $2", who.account_id, lost
    )
    await db_pool.execute(
        "UPDATE memberships SET role = 'owner' WHERE account_id = $1 AND workspace_id = $2",
        who.account_id,
        kept,
    )
    body = await (await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))).json()
    assert body["eligible"] == {str(kept): "owner"}
    # Losing every membership leaves a valid caller with nothing eligible.
    await db_pool.execute("DELETE FROM memberships WHERE account_id = $1", who.account_id)
    body = await (await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))).json()
    assert body["eligible"] == {}


async def test_revoked_approval_is_refused_on_the_next_call(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    assert (await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))).status == 200
    async with db_pool.acquire() as conn:
        assert await revoke_approval(conn, approval.id) is True
        assert await revoke_approval(conn, approval.id) is False  # already revoked
    resp = await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))
    assert resp.status == 401
    assert "revoked" in resp.headers["WWW-Authenticate"]
    assert auth_app.metrics.auth_failures == ["revoked"]


async def test_expired_approval_is_refused(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    await db_pool.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1", approval.id
    )
    resp = await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))
    assert resp.status == 401
    assert auth_app.metrics.auth_failures == ["approval_expired"]


async def test_older_generation_is_refused_after_reapproval(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(2)
    first, old = await granted(db_pool, tokens, who)
    second, new = await granted(
        db_pool, tokens, who, client_id=first.client_id, workspaces=who.workspaces[:1]
    )
    assert second.id == first.id and second.generation == 2
    assert (await auth_app.client.get("/mcp", headers=_bearer(old.access_token))).status == 401
    resp = await auth_app.client.get("/mcp", headers=_bearer(new.access_token))
    body = await resp.json()
    assert body["generation"] == 2
    assert body["eligible"] == {str(who.workspaces[0]): "member"}


async def test_deleted_approval_is_refused(
    auth_app: AuthApp, db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    await db_pool.execute("DELETE FROM approvals WHERE id = $1", approval.id)
    assert (await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))).status == 401


async def test_database_outage_is_unavailable_not_a_crash(
    config: Config, tokens: TokenService, aiohttp_client: ClientFactory
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = await asyncpg.create_pool(f"postgresql://postgres@127.0.0.1:{port}/x", min_size=0)
    try:
        app, metrics = build_app(config, dead)
        client = await aiohttp_client(app)
        token, _ = unbacked_token(tokens)
        resp = await client.get("/mcp", headers=_bearer(token))
        assert resp.status == 503
        assert (await resp.json()) == {"error": "UNAVAILABLE"}
        assert [(op, err) for op, _, err in metrics.db_calls] == [("auth", True)]
    finally:
        await dead.close()


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (
            AuthError("Token expired"),
            'Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource'
            '/mcp", error="invalid_token", error_description="Token expired"',
        ),
        (
            InsufficientScope("This tool needs n8n:read", required_scope="n8n:read"),
            'Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource'
            '/mcp", error="insufficient_scope", error_description="This tool needs n8n:read",'
            ' scope="n8n:read"',
        ),
        (
            AuthError('quote " and \\ and é'),
            'Bearer resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource'
            '/mcp", error="invalid_token", error_description="quote ? and ? and ?"',
        ),
    ],
)
def test_challenge_header(err: AuthError, expected: str, config: Config) -> None:
    assert challenge(err, config) == expected


def test_setup_auth_mounts_the_token_service_and_routes(config: Config) -> None:
    # The metadata routes and token service are mounted by setup_auth alone (after the
    # metrics, which every resource may record into: service/app.py).
    app = web.Application()
    from service.app_keys import CONFIG, METRICS, TOKENS
    from service.auth.setup import setup_auth
    from service.observability.metrics.app_metrics import Metrics

    app[CONFIG] = config
    app[METRICS] = Metrics(config)
    setup_auth(app)
    assert isinstance(app[TOKENS], TokenService)
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    assert {
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/jwks.json",
    } <= paths
