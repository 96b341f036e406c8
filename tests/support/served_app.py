"""Fixtures for the tests that serve the real app: create_app with its metrics listener,
scrapes, and the settings of a real `elova-mcp serve` child process."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from service.app import create_app
from service.app_keys import METRICS
from service.config import Config

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
AppClient = TestClient[web.Request, web.Application]
StartApp = Callable[..., Awaitable[AppClient]]


@pytest.fixture
def start_app(
    aiohttp_client: Callable[..., Awaitable[AppClient]], make_config: Callable[..., Config]
) -> StartApp:
    """Start `create_app` on a free port with its metrics listener on another free port."""

    async def start(extra_routes: dict[str, Handler] | None = None, **overrides: Any) -> AppClient:
        overrides.setdefault("METRICS_PORT", "0")
        app = create_app(make_config(**overrides))
        for path, handler in (extra_routes or {}).items():
            app.router.add_get(path, handler)  # test-only routes, e.g. a slow or broken one
        return await aiohttp_client(app)

    return start


async def scrape(client: AppClient) -> str:
    port = client.app[METRICS].listen_port
    assert port is not None, "the metrics listener is not running"
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return await resp.text()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape keyed by (name, sorted labels)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


@pytest.fixture
def serve_env(test_database: Any, signing_key_pem: bytes, redis_prefix: str) -> dict[str, str]:
    """The settings of a real `elova-mcp serve` child process (ports are added by it)."""
    from tests.support.services import REDIS_URL

    return {
        "ELOVA_DATABASE_URL": test_database.dsn,
        "ELOVA_REDIS_URL": REDIS_URL,
        "ELOVA_REDIS_KEY_PREFIX": redis_prefix,
        "ELOVA_SIGNING_KEY": signing_key_pem.decode(),
        "ELOVA_DB_POOL_MIN": "1",
        "ELOVA_LOG_LEVEL": "INFO",
    }
