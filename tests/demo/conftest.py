"""Fixtures for the demo tests: the demo snapshot, built once, and loaded into the test
database by each test that compares against it (loading is an idempotent upsert)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import pytest

from service.demo.document import DEFAULT_SEED, demo_snapshot
from service.store.load_snapshot import load_snapshot

NOW = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)  # the night Europe/Berlin moves to summer time


@pytest.fixture(scope="session")
def snapshot() -> dict[str, Any]:
    return demo_snapshot(DEFAULT_SEED, NOW)


@pytest.fixture(scope="session")
def demo_document() -> dict[str, Any]:
    """The demo as `make run` builds it now (times relative to the real clock), built once."""
    return demo_snapshot(DEFAULT_SEED)


@pytest.fixture
async def demo_loaded(demo_document: dict[str, Any], db_pool: asyncpg.Pool) -> dict[str, Any]:
    """That document, loaded again for each test that reads it: other tests load the demo
    built at another clock (`run-demo` does, minutes later), and the same record ids then
    carry other contents (statuses and histories follow the clock), so a test compares the
    database with the document only right after loading it (an idempotent upsert)."""
    async with db_pool.acquire() as conn:
        await load_snapshot(conn, msgspec.json.encode(demo_document))
    return demo_document
