"""Real PostgreSQL and Redis for a test run: a fresh database and a fresh key prefix.

Defaults are the machine's services (127.0.0.1:5432 trust auth, 127.0.0.1:6379). Where no
PostgreSQL answers, an embedded one (`pgserver`) is started instead of failing.
"""

from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass

import asyncpg

from service.store.migrate import migrate

ADMIN_DSN = os.environ.get("ELOVA_TEST_ADMIN_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("ELOVA_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


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
    import pgserver  # type: ignore[import-untyped]

    folder = os.path.join(tempfile.gettempdir(), "elova-test-pgserver")
    server = pgserver.get_server(folder, cleanup_mode=None)
    uri: str = server.get_uri()
    return uri


async def create_database(prefix: str = "elova_test") -> TestDatabase:
    admin = ADMIN_DSN
    if not await _reachable(admin):
        admin = _embedded_admin_dsn()
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(admin)
    try:
        await conn.execute(f'CREATE DATABASE "{name}" ENCODING \'UTF8\' TEMPLATE template0')
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
