"""Auth fixtures: accounts, workspaces and memberships inserted with SQL, a token service,
and a minimal aiohttp app carrying only the authorization routes and a probe behind the
bearer check."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from service.auth.tokens import TokenService
from service.config import Config
from tests.auth.helpers import AuthApp, ClientFactory, Seeded, SeedFn, build_app


@pytest.fixture
def seed(db_pool: asyncpg.Pool) -> SeedFn:
    """Insert an account that is a member of `count` new workspaces (role per `role`)."""

    async def make(count: int = 2, role: str = "member") -> Seeded:
        account_id = uuid.uuid4()
        email = f"user-{account_id.hex[:12]}@Example.test"
        workspaces = [uuid.uuid4() for _ in range(count)]
        foreign = uuid.uuid4()
        async with db_pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO accounts (id, email, name) VALUES ($1, $2, 'Test user')",
                account_id,
                email,
            )
            await conn.execute(
                "INSERT INTO workspaces (id, name, time_zone)"
                " SELECT w, 'ws ' || w::text, 'UTC' FROM unnest($1::uuid[]) AS w",
                [*workspaces, foreign],
            )
            await conn.execute(
                "INSERT INTO memberships (account_id, workspace_id, role)"
                " SELECT $1, w, $3 FROM unnest($2::uuid[]) AS w",
                account_id,
                workspaces,
                role,
            )
        return Seeded(account_id, email, workspaces, foreign)

    return make


@pytest.fixture
def tokens(config: Config) -> TokenService:
    return TokenService(config)


@pytest.fixture
async def auth_app(
    config: Config,
    db_pool: asyncpg.Pool,
    aiohttp_client: ClientFactory,
) -> AsyncIterator[AuthApp]:
    app, metrics = build_app(config, db_pool)
    client = await aiohttp_client(app)
    yield AuthApp(client, metrics, app)
