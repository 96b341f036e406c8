"""The pool's reset: a connection released inside a transaction (a request cancelled by its
deadline or a disconnect) comes back to the next request outside it, without the default
per-release reset query."""

from __future__ import annotations

import asyncio

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
