"""Fixtures shared by every test: one fresh database and Redis prefix per run, keys, the app.

Tests that change records take `db_pool` and clean up what they add (or use their own
workspace ids); the database itself is dropped at the end of the run.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from service.config import Config
from tests.support.keys import ed25519_pem
from tests.support.services import (
    REDIS_URL,
    TestDatabase,
    create_database,
    drop_database,
    new_redis_prefix,
)

# Fixtures more than one package uses, kept in modules of their own.
pytest_plugins = ["tests.support.access_log", "tests.support.served_app"]


_CREATED: list[TestDatabase] = []


@pytest.fixture(scope="session")
def test_database() -> TestDatabase:
    db = asyncio.run(create_database())
    _CREATED.append(db)
    return db


def pytest_sessionfinish() -> None:
    """The run's database is dropped once every test is done, not in the teardown of the last
    test, where the drop would count against that test's timeout: on a busy shared cluster
    one DROP DATABASE took longer than 30 s (docs/decisions/tooling.md)."""
    for db in _CREATED:
        asyncio.run(drop_database(db))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked `unit` (what `make check` runs without services) must not need the
    test database."""
    if item.get_closest_marker("unit") is not None and "test_database" in getattr(
        item, "fixturenames", ()
    ):
        pytest.fail(f"{item.nodeid} is marked unit but needs the test database", pytrace=False)


@pytest.fixture(scope="session")
def signing_key_pem() -> bytes:
    return ed25519_pem()


@pytest.fixture(scope="session")
def redis_prefix() -> str:
    return new_redis_prefix()


@pytest.fixture
def make_config(
    test_database: TestDatabase, signing_key_pem: bytes, redis_prefix: str
) -> Callable[..., Config]:
    """Build a Config the way `serve` does, from an env mapping; keyword overrides are
    ELOVA_* variables without the prefix, e.g. make_config(LIMIT_GLOBAL_CONCURRENCY="8")."""

    def build(**overrides: Any) -> Config:
        env = {
            "ELOVA_DATABASE_URL": test_database.dsn,
            "ELOVA_REDIS_URL": REDIS_URL,
            "ELOVA_REDIS_KEY_PREFIX": redis_prefix,
            "ELOVA_SIGNING_KEY": signing_key_pem.decode(),
            "ELOVA_PUBLIC_URL": "http://127.0.0.1:8080",
            "ELOVA_DB_POOL_MIN": "1",
            # App-level tests share 2 cores with PostgreSQL, Redis and each other: a busy
            # event loop must not turn a Redis reply into a spurious 429 (tests of the
            # timeout itself set their own).
            "ELOVA_REDIS_TIMEOUT_MS": "1000",
            # Nor must a loop made late by the neighbours, or a test's burst of concurrent
            # calls, turn answers into load-shedding 503s (tests of shedding set their own).
            "ELOVA_SHED_LOOP_LAG_MS": "0",
            "ELOVA_SHED_ADMISSION": "fixed",
            "ELOVA_SHED_MAX_INFLIGHT": "10000",
            # Every registration of the run comes from 127.0.0.1: the per-address limit must
            # not refuse the suite (tests of the limit set their own).
            "ELOVA_OAUTH_REGISTER_BURST": "100000",
        }
        for key, value in overrides.items():
            name = key if key.startswith("ELOVA_") else f"ELOVA_{key}"
            if value is None:
                env.pop(name, None)
            else:
                env[name] = str(value)
        return Config.from_env(env)

    return build


@pytest.fixture
def config(make_config: Callable[..., Config]) -> Config:
    return make_config()


@pytest.fixture
async def db_pool(test_database: TestDatabase) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=4)
    assert pool is not None
    yield pool
    await pool.close()
