"""Fixtures for the demo tests: the demo snapshot, built once, and loaded into the test
database once per run (loading is an idempotent upsert, so other tests may load it again)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import pytest

from service.demo import DEFAULT_SEED, demo_snapshot
from service.store.snapshot import load_snapshot
from tests.support.services import TestDatabase

NOW = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # the night Europe/Berlin moves to summer time


@pytest.fixture(scope="session")
def snapshot() -> dict[str, Any]:
    return demo_snapshot(DEFAULT_SEED, NOW)


@pytest.fixture(scope="session")
def demo_loaded(test_database: TestDatabase) -> dict[str, Any]:
    """The demo as `make run` loads it now (times relative to the real clock)."""
    doc = demo_snapshot(DEFAULT_SEED)

    async def load() -> None:
        conn = await asyncpg.connect(test_database.dsn)
        try:
            await load_snapshot(conn, msgspec.json.encode(doc))
        finally:
            await conn.close()

    asyncio.run(load())
    return doc
