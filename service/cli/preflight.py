"""Checks a command makes before it starts work, each refusal a one-line `StartupFailure`.

- `check_listeners`: `serve` (and `run-demo`) can bind ELOVA_HOST with ELOVA_PORT and
  ELOVA_METRICS_PORT, before anything is built or printed.
- `connect_postgresql`: the first connection of every database command, and a probe
  connection of `serve` before its pool, so a refused login, a missing database or a
  PostgreSQL that is down is named as such.
- `check_redis`: one PING at start; a refused login or TLS handshake stops the start, a
  Redis that does not answer is only logged. Why checks first, and why Redis's login is
  fatal but its absence is not: docs/decisions/ops.md, "Start-up failures (issue 14)".
"""

from __future__ import annotations

import logging
import socket

import asyncpg
import redis.exceptions

from service.cli.failures import (
    BAD_CONFIGURATION,
    UNAVAILABLE,
    listen_failure,
    malformed_url,
    postgresql_failure,
    redis_failure,
)
from service.config import Config
from service.errors import StartupFailure
from service.store.db import connect

log = logging.getLogger(__name__)

# A start waits this long for PostgreSQL's first answer (asyncpg's default is 60 s).
CONNECT_TIMEOUT_SECONDS = 10.0
# The start-up PING to Redis: generous, it runs once.
REDIS_CHECK_SECONDS = 2.0


def check_listeners(cfg: Config) -> None:
    """Bind (and release at once) every address the listeners will bind."""
    ports = [(cfg.port, "ELOVA_PORT")]
    if cfg.metrics_port is not None:
        if cfg.metrics_port == cfg.port and cfg.port != 0:
            raise StartupFailure(
                f"ELOVA_METRICS_PORT is ELOVA_PORT ({cfg.port}); give the metrics listener "
                "a port of its own",
                BAD_CONFIGURATION,
            )
        ports.append((cfg.metrics_port, "ELOVA_METRICS_PORT"))
    for port, setting in ports:
        try:
            _bind_each(cfg.host, port)
        except OSError as err:
            raise listen_failure(err, cfg.host, port, setting) from err


def _bind_each(host: str, port: int) -> None:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            # As asyncio binds: a port in TIME_WAIT is free, one that listens is not.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)


async def connect_postgresql(dsn: str, setting: str = "ELOVA_DATABASE_URL") -> asyncpg.Connection:
    """A connection, or the StartupFailure that says why there is none; `setting` is where
    the URL came from."""
    try:
        conn = await connect(dsn, timeout=CONNECT_TIMEOUT_SECONDS)
    except (
        OSError,
        ValueError,
        OverflowError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
    ) as err:
        failure = postgresql_failure(err, dsn, setting)
        if failure is None and isinstance(
            err, asyncpg.ClientConfigurationError | ValueError | OverflowError
        ):
            failure = malformed_url(err, setting)
        if failure is None:
            failure = StartupFailure(
                f"cannot connect to PostgreSQL ({type(err).__name__}: {err}); check {setting}",
                UNAVAILABLE,
            )
        raise failure from err
    return conn


async def check_postgresql(dsn: str, setting: str = "ELOVA_DATABASE_URL") -> None:
    conn = await connect_postgresql(dsn, setting)
    await conn.close()


async def check_redis(cfg: Config) -> None:
    """Refuse a Redis login or TLS failure; log (and start anyway) when Redis is down."""
    if cfg.redis_url is None or cfg.redis_engine.mode == "sentinel":
        # Sentinel mode: the URL names no server (only the master's credentials and scheme);
        # the master is found through the sentinels once the service runs.
        return
    from service.limits.redis_client import make_client

    client = make_client(cfg.redis_url, timeout=REDIS_CHECK_SECONDS)
    try:
        await client.ping()
    except (redis.exceptions.RedisError, OSError) as err:
        failure = redis_failure(err, cfg.redis_url)
        if failure is not None:
            raise failure from err
        log.warning(
            "Redis does not answer at start; the limits are per process until it does",
            extra={"error_type": type(err).__name__},
        )
    finally:
        await client.aclose()


async def check_dependencies(cfg: Config) -> None:
    """What `serve` needs before it builds its pools: PostgreSQL, and Redis's login."""
    await check_postgresql(cfg.database_url)
    await check_redis(cfg)
