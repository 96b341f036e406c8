"""Auth fixtures: accounts, workspaces and memberships inserted with SQL, a token service,
a minimal aiohttp app carrying only the authorization routes and a probe behind the
bearer check, and the real app with one browser for the OAuth flow (`oauth`, `account`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from service.app import create_app
from service.auth.tokens import TokenService
from service.config import Config
from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, seed_account
from tests.auth.helpers import AuthApp, ClientFactory, SeedFn, build_app
from tests.support.approvals import Member, seed_member


@pytest.fixture
def seed(db_pool: asyncpg.Pool) -> SeedFn:
    """Insert an account that is a member of `count` new workspaces (role per `role`)."""

    async def make(count: int = 2, role: str = "member") -> Member:
        return await seed_member(db_pool, workspaces=count, role=role)

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


@pytest.fixture
async def oauth(aiohttp_client: ClientFactory, config: Config) -> OAuth:
    client = await aiohttp_client(create_app(config))
    return OAuth(client, config)


@pytest.fixture
async def account(oauth: OAuth) -> Account:
    return await seed_account(oauth.pool, workspaces=3)
