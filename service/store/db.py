"""The asyncpg pools (the primary's, and the read replica's when one is set), created and
closed by a cleanup context; how every connection is opened, direct or through a
transaction-mode pooler (docs/decisions/engines.md).

Direct (`ELOVA_DATABASE_POOLER=none`): statements prepared once per connection, the session
settings (statement timeout, JIT, time zone) as startup parameters. Through a pooler
(`transaction`): nothing outlives a transaction (`PooledConnection`). Sockets notice a dead
peer, and a primary's connection refused a write as read-only is closed (`StoreConnection`);
a multi-host URL is connected host by host (service/store/multi_host.py). Failover as
on-call sees it: docs/operations.md, Database failover.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
from aiohttp import web

from service.app_keys import CONFIG, DB_POOL, DB_READ_POOL
from service.config import Config
from service.observability.tracing import hooks as tracing
from service.store.multi_host import HostByHost

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


class StoreConnection(asyncpg.Connection):  # type: ignore[misc]
    """A pool's connection: its socket tuned to notice a dead peer, and (on the primary's
    pool) closed when a write finds the server read-only. Set per pool on a subclass."""

    tcp_timeout_seconds = 10.0
    writes = False  # the primary's pool: a read-only refusal means the server is not primary

    def __init__(self, protocol: Any, transport: Any, *args: Any) -> None:
        super().__init__(protocol, transport, *args)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            tune_socket(sock, self.tcp_timeout_seconds)
        traced = (
            tracing.statement_logger()
        )  # None unless tracing is on (service/observability/tracing/)
        if traced is not None:
            self.add_query_logger(traced)

    # The read-only check catches the refusal where asyncpg raises it: a query logger would
    # cost every statement a timing, a record and a loop callback (the request path's
    # statements all pass through these three).
    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        try:
            return str(await super().execute(query, *args, timeout=timeout))
        except asyncpg.ReadOnlySQLTransactionError:
            self._refused_as_read_only()
            raise

    async def _execute(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._execute(*args, **kwargs)
        except asyncpg.ReadOnlySQLTransactionError:
            self._refused_as_read_only()
            raise

    async def _executemany(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super()._executemany(*args, **kwargs)
        except asyncpg.ReadOnlySQLTransactionError:
            self._refused_as_read_only()
            raise

    def _refused_as_read_only(self) -> None:
        if self.writes and not self.is_closed():  # once, though execute calls _execute
            # The primary's URL found a read-write server when this connection opened; it is
            # read-only now (demoted, or a failover's former primary): new connections find
            # the writable host (target_session_attrs=read-write).
            log.warning("a primary connection is read-only now: closed, the next one reconnects")
            self.terminate()


def tune_socket(sock: socket.socket, seconds: float) -> None:
    """Keepalive probes after `seconds / 2` idle, then every `seconds / 6`; TCP_USER_TIMEOUT
    `seconds` (Linux): data or probes unacknowledged that long close the connection."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle, interval = max(1, int(seconds / 2)), max(1, int(seconds / 6))
    for option, value in (
        ("TCP_KEEPIDLE", idle),
        ("TCP_KEEPINTVL", interval),
        ("TCP_KEEPCNT", 3),
        ("TCP_USER_TIMEOUT", int(seconds * 1000)),
    ):
        if hasattr(socket, option):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


class PooledConnection(StoreConnection):
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


def connect_options(
    cfg: Config, application_name: str = "elova-mcp", *, writes: bool = False
) -> dict[str, Any]:
    """The asyncpg connection options of the service's pools for `cfg`'s pooler setting;
    `writes`: the primary's pool."""
    settings = {"application_name": application_name, "TimeZone": "UTC"}
    tuned = {"tcp_timeout_seconds": cfg.database_tcp_timeout_seconds, "writes": writes}
    if cfg.database_pooler != TRANSACTION:
        return {
            "server_settings": {
                **settings,
                "statement_timeout": str(statement_timeout_ms(cfg)),
                # Short indexed reads: JIT compilation only adds tens of milliseconds to them.
                "jit": "off",
            },
            "connection_class": type("StoreConnection", (StoreConnection,), tuned),
        }
    timeout = statement_timeout_ms(cfg)
    per_transaction = f"SET LOCAL statement_timeout = {timeout}; SET LOCAL jit = off"
    if cfg.database_pooler_settings == SERVER:
        per_transaction = ""  # the role's or database's own: checked at start
    pooled = {**tuned, "settings_sql": per_transaction}
    return {
        "server_settings": settings,
        "statement_cache_size": 0,
        "connection_class": type("PooledConnection", (PooledConnection,), pooled),
    }


async def create_pool(
    cfg: Config,
    *,
    min_size: int | None = None,
    dsn: str | None = None,
    application_name: str = "elova-mcp",
) -> asyncpg.Pool:
    writes = dsn is None  # the primary's
    url = cfg.database_url if dsn is None else dsn
    several = HostByHost(url, cfg.database_connect_timeout_seconds)
    pool = StorePool(
        url,
        connect=several if several.hosts > 1 else None,
        min_size=cfg.db_pool_min if min_size is None else min_size,
        max_size=cfg.db_pool_max,
        max_queries=50_000,
        max_inactive_connection_lifetime=300.0,
        loop=None,
        record_class=asyncpg.Record,
        command_timeout=cfg.limits.request_deadline_seconds + 5,
        timeout=cfg.database_connect_timeout_seconds,
        reset=reset_when_needed,
        **connect_options(cfg, application_name, writes=writes),
    )
    await pool
    return pool


class StorePool(asyncpg.Pool):  # type: ignore[misc]
    """asyncpg's pool, whose release of a connection takes RELEASE_SECONDS at most, and
    costs no task when it has nothing to wait for.

    A statement cancelled by the request deadline is cancelled on the server through a
    connection of its own, and asyncpg's release waits for that (up to the command timeout,
    the deadline + 5 s) before the connection is free again. On a server that went silent
    the cancel is never answered: every connection of the pool would stay taken that long,
    and the pool could not reach a promoted standby meanwhile. Past RELEASE_SECONDS the
    connection is closed instead, and its place is free for a new one.

    asyncpg runs every release in a task of its own (asyncio.shield), so that a cancelled
    caller cannot leave the connection half released: two turns of the event loop and a
    task a statement. A connection with no cancel pending, no transaction open (nothing to
    roll back), our reset (`reset_when_needed`) and no reason to be closed is released
    without waiting for anything, so nothing can interrupt it: it is released at once, in
    asyncpg 0.32's own steps (pinned) without their timeout context."""

    async def release(
        self, connection: asyncpg.Connection, *, timeout: float | None = None
    ) -> None:
        holder = getattr(connection, "_holder", None)
        con = getattr(connection, "_con", None)
        if (
            holder is None
            or con is None
            or holder._pool is not self
            or con.is_closed()
            or con._protocol._is_cancelling()
            or con.is_in_transaction()
            or con._top_xact is not None
            or con._protocol.queries_count >= holder._max_queries
            or holder._generation != self._generation
            or self._reset is not reset_when_needed
        ):
            bound = RELEASE_SECONDS if timeout is None else timeout
            await super().release(connection, timeout=bound)
            return
        self._check_init()
        con._on_release()
        # holder.release(None) step for step for a connection in this state: the
        # connection's own reset (its listeners dropped; no transaction to roll back), ours
        # (nothing to do), the holder back in the queue. Without the timeout context that
        # holder.release opens around the two resets, though nothing there can wait.
        con._listeners.clear()
        con._log_listeners.clear()
        holder._timeout = None
        holder._release()


RELEASE_SECONDS = 2.0


async def connect(dsn: str, *, timeout: float = 60) -> asyncpg.Connection:
    """One connection for an operator command (migrate, load, approve, account, demo-data,
    run-demo): safe through a transaction-mode pooler whatever ELOVA_DATABASE_POOLER says —
    no statement cache (no named statements) and no session settings; the commands keep
    their work in transactions. A multi-host URL gets `timeout` per host, as the pools do."""
    several = HostByHost(dsn, timeout)
    if several.hosts > 1:
        return await several(dsn, statement_cache_size=0)
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
