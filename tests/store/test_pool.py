"""The pool's reset: a connection released inside a transaction (a request cancelled by its
deadline or a disconnect) comes back to the next request outside it, without the default
per-release reset query."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from service.config import Config
from service.store.db import create_pool


async def test_open_transaction_is_rolled_back_on_release(config: Config) -> None:
    pool = await create_pool(config, min_size=1)
    try:
        async with pool.acquire() as conn:
            await conn.execute("BEGIN")
            await conn.execute("CREATE TEMP TABLE left_behind (x int)")
        for _ in range(3):  # whichever connection comes next
            async with pool.acquire() as conn:
                assert not conn.is_in_transaction()
                assert await conn.fetchval("SELECT to_regclass('pg_temp.left_behind')") is None
    finally:
        await pool.close()


async def test_cancelled_work_inside_a_transaction_leaves_a_clean_connection(
    config: Config,
) -> None:
    pool = await create_pool(config, min_size=1)
    try:

        async def slow() -> None:
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL statement_timeout = 0")
                await conn.execute("SELECT pg_sleep(5)")

        task = asyncio.create_task(slow())
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        async with pool.acquire() as conn:
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SHOW jit") == "off"
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await pool.close()


async def test_a_clean_release_frees_the_connection_for_the_next_request(
    make_config: Callable[..., Config],
) -> None:
    """The release without a task or a timeout (StorePool's fast path): the same
    connection serves the next request, the old proxy is detached, and a pool of one
    connection is never short of it."""
    pool = await create_pool(make_config(DB_POOL_MIN="1", DB_POOL_MAX="1"))
    try:
        async with pool.acquire() as first:
            raw = first._con
            assert await first.fetchval("SELECT 1") == 1
        assert first._con is None  # detached: the proxy cannot be used after its release
        for _ in range(50):  # far more releases than a leak of the one slot would allow
            async with pool.acquire(timeout=2) as conn:
                assert conn._con is raw
                assert await conn.fetchval("SELECT 2") == 2
        assert pool.get_idle_size() == 1
    finally:
        await pool.close()
