"""The asyncpg pools (the primary's, and the read replica's when one is set), created and
closed by a cleanup context; how every connection is opened, direct or through a
transaction-mode pooler (docs/decisions/engines.md).

Direct (`ELOVA_DATABASE_POOLER=none`): statements are prepared once per connection and the
session settings (statement timeout, JIT, time zone) are startup parameters.

Through a transaction-mode pooler (`transaction`): the server connection changes between
transactions, so nothing may outlive one. asyncpg keeps no statement cache (its unnamed
statement is parsed and bound before the Sync that ends a transaction: the pooler keeps the
server connection that long), and the settings a pooler refuses at startup are applied with
SET LOCAL in the same round trip as the BEGIN of every transaction; a statement run outside
a transaction gets one of its own. The time zone and application name stay startup
parameters: PgBouncer tracks both and sets them on whichever server connection it hands out.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from aiohttp import web

from service.config import Config
from service.keys import CONFIG, DB_POOL, DB_READ_POOL

log = logging.getLogger(__name__)

TRANSACTION = "transaction"
SERVER = "server"  # ELOVA_DATABASE_POOLER_SETTINGS: the role or database holds the settings


async def reset_when_needed(conn: asyncpg.Connection) -> None:
    """What a released connection needs before its next user, without a round trip.

    asyncpg's default reset runs a reset query (RESET ALL, UNLISTEN *, advisory unlocks, …)
    on every release: one extra round trip per request, the largest cost left in a tool call
    under load. This service keeps no session state — only SET LOCAL and transaction-level
    advisory locks — so the one thing to undo is a transaction a cancelled request left open.
    """
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def statement_timeout_ms(cfg: Config) -> int:
    """The statement timeout backs the request deadline: work the deadline cancels on the
    client side is also stopped by the server, even if the cancel message is lost."""
    return int(cfg.limits.request_deadline_seconds * 1000) + 1000


class PooledConnection(asyncpg.Connection):  # type: ignore[misc]
    """A connection through a transaction-mode pooler. With `settings_sql`, every statement
    runs in a transaction that starts with the service's settings (SET LOCAL, in the BEGIN's
    round trip); without (the settings are the role's or database's own), statements run
    as they come. Statements are unnamed either way."""

    settings_sql = ""  # "SET LOCAL …; SET LOCAL …", set on a subclass per pool
    through_pooler = True  # service.store.plans: hot statements as server-side functions

    def _own_transaction(self) -> bool:
        return bool(self.settings_sql) and not self.is_in_transaction()

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        if not args and query.startswith("BEGIN") and self._own_transaction():
            # asyncpg's Transaction.start: the settings ride on its BEGIN.
            return str(await super().execute(f"{query.rstrip(';')}; {self.settings_sql}"))
        if not self._own_transaction():
            return str(await super().execute(query, *args, timeout=timeout))
        async with self.transaction():
            return str(await super().execute(query, *args, timeout=timeout))

    async def executemany(self, command: str, args: Any, *, timeout: float | None = None) -> None:
        if not self._own_transaction():
            return await super().executemany(command, args, timeout=timeout)  # type: ignore[no-any-return]
        async with self.transaction():
            return await super().executemany(command, args, timeout=timeout)  # type: ignore[no-any-return]

    async def fetch(self, query: str, *args: Any, **kwargs: Any) -> list[asyncpg.Record]:
        if not self._own_transaction():
            return await super().fetch(query, *args, **kwargs)  # type: ignore[no-any-return]
        async with self.transaction():
            return await super().fetch(query, *args, **kwargs)  # type: ignore[no-any-return]

    async def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> asyncpg.Record | None:
        if not self._own_transaction():
            return await super().fetchrow(query, *args, **kwargs)
        async with self.transaction():
            return await super().fetchrow(query, *args, **kwargs)

    async def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        if not self._own_transaction():
            return await super().fetchval(query, *args, **kwargs)
        async with self.transaction():
            return await super().fetchval(query, *args, **kwargs)

    async def prepare(self, query: str, **kwargs: Any) -> Any:
        # The unnamed statement: read for its attributes (or run) before the next Sync.
        kwargs.setdefault("name", "")
        return await super().prepare(query, **kwargs)


def _pooled_class(settings_sql: str) -> type[PooledConnection]:
    return type("PooledConnection", (PooledConnection,), {"settings_sql": settings_sql})


def connect_options(cfg: Config, application_name: str = "elova-mcp") -> dict[str, Any]:
    """The asyncpg connection options of the service's pools for `cfg`'s pooler setting."""
    settings = {"application_name": application_name, "TimeZone": "UTC"}
    if cfg.database_pooler != TRANSACTION:
        return {
            "server_settings": {
                **settings,
                "statement_timeout": str(statement_timeout_ms(cfg)),
                # Short indexed reads: JIT compilation only adds tens of milliseconds to them.
                "jit": "off",
            }
        }
    timeout = statement_timeout_ms(cfg)
    per_transaction = f"SET LOCAL statement_timeout = {timeout}; SET LOCAL jit = off"
    if cfg.database_pooler_settings == SERVER:
        per_transaction = ""  # the role's or database's own: checked at start
    return {
        "server_settings": settings,
        "statement_cache_size": 0,
        "connection_class": _pooled_class(per_transaction),
    }


async def create_pool(
    cfg: Config,
    *,
    min_size: int | None = None,
    dsn: str | None = None,
    application_name: str = "elova-mcp",
) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(
        dsn=cfg.database_url if dsn is None else dsn,
        min_size=cfg.db_pool_min if min_size is None else min_size,
        max_size=cfg.db_pool_max,
        command_timeout=cfg.limits.request_deadline_seconds + 5,
        reset=reset_when_needed,
        **connect_options(cfg, application_name),
    )
    assert pool is not None
    return pool


async def connect(dsn: str, *, timeout: float = 60) -> asyncpg.Connection:
    """One connection for an operator command (migrate, load, approve, account, demo-data,
    run-demo): safe through a transaction-mode pooler whatever ELOVA_DATABASE_POOLER says —
    no statement cache (no named statements) and no session settings; the commands keep
    their work in transactions."""
    return await asyncpg.connect(dsn, timeout=timeout, statement_cache_size=0)


async def check_server_settings(cfg: Config, pool: asyncpg.Pool, which: str) -> bool:
    """With ELOVA_DATABASE_POOLER_SETTINGS=server: warn at start when the server does not
    hold what the service would otherwise set (a statement timeout backing the deadline,
    JIT off). The service still starts: the deadline's cancel still stops the work."""
    row = await pool.fetchrow(_SERVER_SETTINGS)
    assert row is not None
    timeout, jit = int(row[0]), row[1]
    wanted = statement_timeout_ms(cfg)
    ok = 0 < timeout <= 2 * wanted and jit == "off"
    if not ok:
        log.warning(
            "ELOVA_DATABASE_POOLER_SETTINGS=server but the %s database has statement_timeout="
            "%dms and jit=%s; set them on the service's role: ALTER ROLE … SET "
            "statement_timeout = %d, SET jit = off",
            which, timeout, jit, wanted,
        )  # fmt: skip
    return ok


_SERVER_SETTINGS = (  # pg_settings gives statement_timeout in milliseconds
    "SELECT setting::int, current_setting('jit') FROM pg_settings WHERE name = 'statement_timeout'"
)


async def pool_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG]
    pool = await create_pool(cfg)
    app[DB_POOL] = pool
    reads = pool
    if cfg.database_read_url is not None:
        try:
            reads = await create_pool(
                cfg, dsn=cfg.database_read_url, application_name="elova-mcp-read"
            )
        except BaseException:
            await pool.close()
            raise
    app[DB_READ_POOL] = reads
    if cfg.database_pooler == TRANSACTION and cfg.database_pooler_settings == SERVER:
        await check_server_settings(cfg, pool, "primary")
        if reads is not pool:
            await check_server_settings(cfg, reads, "read")
    yield
    if reads is not pool:
        await reads.close()
    await pool.close()


def read_pool(app: web.Application) -> asyncpg.Pool:
    """The pool for tool calls' reads of retained records (the primary's without a read URL)."""
    return app.get(DB_READ_POOL) or app[DB_POOL]
