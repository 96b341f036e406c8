"""The asyncpg pool: one per app, created and closed by a cleanup context."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
from aiohttp import web

from service.config import Config
from service.keys import CONFIG, DB_POOL


async def reset_when_needed(conn: asyncpg.Connection) -> None:
    """What a released connection needs before its next user, without a round trip.

    asyncpg's default reset runs a reset query (RESET ALL, UNLISTEN *, advisory unlocks, …)
    on every release: one extra round trip per request, the largest cost left in a tool call
    under load. This service keeps no session state — only SET LOCAL and transaction-level
    advisory locks — so the one thing to undo is a transaction a cancelled request left open.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def create_pool(cfg: Config, *, min_size: int | None = None) -> asyncpg.Pool:
    # The statement timeout backs the request deadline: work the deadline cancels on the
    # client side is also stopped by the server, even if the cancel message is lost.
    timeout_ms = int(cfg.limits.request_deadline_seconds * 1000) + 1000
    pool = await asyncpg.create_pool(
        dsn=cfg.database_url,
        min_size=cfg.db_pool_min if min_size is None else min_size,
        max_size=cfg.db_pool_max,
        command_timeout=cfg.limits.request_deadline_seconds + 5,
        reset=reset_when_needed,
        server_settings={
            "application_name": "elova-mcp",
            "statement_timeout": str(timeout_ms),
            "TimeZone": "UTC",
            # Short indexed reads: JIT compilation only adds tens of milliseconds to them.
            "jit": "off",
        },
    )
    assert pool is not None
    return pool


async def pool_ctx(app: web.Application) -> AsyncIterator[None]:
    pool = await create_pool(app[CONFIG])
    app[DB_POOL] = pool
    yield
    await pool.close()
