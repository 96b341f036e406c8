"""Fixtures of the hostile tests: the real app (create_app) over real PostgreSQL and Redis,
a two-tenant world with real approvals, and the hypothesis settings every fuzz test uses.

Hypothesis: no deadline (a call crosses PostgreSQL and Redis, whose latency is not the
property under test) and a bounded number of examples, so the whole hostile suite stays
within its share of `make test`. ELOVA_HOSTILE_EXAMPLES raises the count for a deeper run.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, settings

from service.app import create_app
from service.app_keys import DB_POOL, TOKENS
from service.config import Config
from tests.hostile.wire import Mcp
from tests.hostile.world import World, build_world

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]

EXAMPLES = int(os.environ.get("ELOVA_HOSTILE_EXAMPLES", "150"))
# The app fixture is shared by every example on purpose: the server must stay healthy
# across all of them, so the function-scoped fixture health check does not apply.
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=os.environ.get("ELOVA_HOSTILE_RANDOM") is None,
    database=None,
)
# Limits high enough that fuzzing never meets a 429 unless a test asks for limits.
GENEROUS_LIMITS = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "LIMIT_ACCOUNT_CONCURRENCY": "64",
    "LIMIT_GLOBAL_CONCURRENCY": "64",
}


@dataclass
class Hostile:
    """The app under attack, its /mcp wire and the world seeded into it."""

    client: TestClient[web.Request, web.Application]
    mcp: Mcp
    world: World

    @property
    def app(self) -> web.Application:
        app: web.Application = self.client.app
        return app


HostileFactory = Callable[..., Awaitable[Hostile]]


@pytest.fixture
def make_hostile(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config]
) -> HostileFactory:
    async def build(**overrides: Any) -> Hostile:
        client = await aiohttp_client(create_app(make_config(**{**GENEROUS_LIMITS, **overrides})))
        app = client.app
        world = await build_world(app[DB_POOL], app[TOKENS])
        return Hostile(client, Mcp(client), world)

    return build


@pytest.fixture
async def hostile(make_hostile: HostileFactory) -> Hostile:
    return await make_hostile()
