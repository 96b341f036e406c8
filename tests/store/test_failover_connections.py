"""What the pools do for a failover (docs/operations.md, Database failover): every
connection's socket notices a dead peer (keepalive, TCP_USER_TIMEOUT), and a primary's
connection refused a write as read-only (a former primary) is closed instead of reused."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from service.config import Config
from service.store.db import create_pool, tune_socket
from service.store.multi_host import HostByHost
from tests.support.relay import Relay
from tests.support.server import free_port
from tests.support.services import TestDatabase

ROOT = Path(__file__).resolve().parents[2]


def _socket_of(conn: asyncpg.pool.PoolConnectionProxy) -> socket.socket:
    sock: socket.socket = conn._con._transport.get_extra_info("socket")
    return sock


async def test_pool_connections_notice_a_silent_peer(config: Config) -> None:
    pool = await create_pool(config, min_size=1)
    try:
        async with pool.acquire() as conn:
            sock = _socket_of(conn)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 10_000
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 5
    finally:
        await pool.close()


@pytest.mark.parametrize(("seconds", "idle", "interval"), [(10, 5, 1), (30, 15, 5), (1, 1, 1)])
def test_keepalive_follows_the_tcp_timeout(seconds: float, idle: int, interval: int) -> None:
    with socket.socket() as sock:
        tune_socket(sock, seconds)
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == idle
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == interval
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == seconds * 1000


async def _refused_write(conn: asyncpg.pool.PoolConnectionProxy) -> None:
    # What a connection to a server that is no longer the primary is answered on a write.
    await conn.execute("SET SESSION default_transaction_read_only = on")
    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        await conn.execute("CREATE TABLE never_made (x int)")


async def test_a_read_only_primary_connection_is_closed_not_reused(config: Config) -> None:
    pool = await create_pool(config, min_size=1)
    try:
        async with pool.acquire() as conn:
            first = conn._con
            await _refused_write(conn)
            for _ in range(20):
                if first.is_closed():
                    break
                await asyncio.sleep(0.01)
            assert first.is_closed()
        async with pool.acquire() as conn:  # a new session: the writable server again
            assert conn._con is not first
            assert await conn.fetchval("SHOW default_transaction_read_only") == "off"
    finally:
        await pool.close()


async def test_the_read_pool_keeps_its_connections(config: Config) -> None:
    pool = await create_pool(config, min_size=1, dsn=config.database_url)  # a read pool
    try:
        async with pool.acquire() as conn:
            await _refused_write(conn)
            await asyncio.sleep(0.05)
            assert not conn._con.is_closed()
            await conn.execute("RESET default_transaction_read_only")
    finally:
        await pool.close()


def _operator(command: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env["ELOVA_DATABASE_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "service", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_operator_commands_follow_a_multi_host_url(test_database: TestDatabase) -> None:
    parts = urlsplit(test_database.dsn)
    user = parts.netloc.rpartition("@")[0]
    closed = free_port()  # nothing listens: the first host is down, the second answers
    hosts = f"{user}@127.0.0.1:{closed},{parts.hostname}:{parts.port or 5432}"
    url = parts._replace(netloc=hosts, query="target_session_attrs=read-write").geturl()
    done = _operator("migrate", url)
    assert done.returncode == 0, done.stderr


def test_an_operator_command_with_every_host_down_names_them_not_the_password() -> None:
    down = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    done = _operator("migrate", f"postgresql://u:s3cret@{down}/x?target_session_attrs=read-write")
    assert done.returncode == 1, done.stderr
    assert down in done.stderr and "s3cret" not in done.stderr + done.stdout


async def test_a_silent_first_host_costs_one_connect_timeout(test_database: TestDatabase) -> None:
    parts = urlsplit(test_database.dsn)
    silent = await Relay(parts.port or 5432).start()
    silent.blackhole()  # accepts, never answers: asyncpg alone would spend its whole timeout
    try:
        user = parts.netloc.rpartition("@")[0]
        hosts = f"{user}@127.0.0.1:{silent.port},{parts.hostname}:{parts.port or 5432}"
        url = parts._replace(netloc=hosts, query="target_session_attrs=read-write").geturl()
        connect = HostByHost(url, 0.5)
        started = time.monotonic()
        conn = await connect(url, timeout=60)
        took = time.monotonic() - started
        await conn.close()
        assert 0.5 <= took < 3.0, took
        started = time.monotonic()  # the host that answered is tried first from now on
        conn = await connect(url, timeout=60)
        assert time.monotonic() - started < 0.5
        await conn.close()
    finally:
        await silent.stop()
