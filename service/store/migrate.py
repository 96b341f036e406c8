"""Versioned SQL migrations: plain files `NNNN_name.sql`, applied in order, once each.

Safe to run twice or from several replicas at once: a session advisory lock serialises
runners, and `schema_migrations` records what was applied (with a checksum, so an edited
migration is refused instead of silently skipped).

Safe to run while the previous release serves (docs/decisions/migrations.md): each migration
commits on its own, so the locks it takes are held for that migration only; and a migration
waits at most `LOCK_TIMEOUT_SECONDS` for a table lock before it gives up its place in the lock
queue (every reader of that table would queue behind it), pauses and tries again. A migration
whose file says `-- migrate: outside a transaction` (one statement, such as `CREATE INDEX
CONCURRENTLY`) runs outside a transaction block, where such statements must run.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import asyncpg

from service.errors import MigrationError

_LOCK_KEY = 0x656C6F7661  # "elova": one advisory lock for the migration runner
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_OUTSIDE_TRANSACTION = re.compile(r"^-- migrate: outside a transaction\s*$", re.MULTILINE)

# How long a migration's statement may wait for a table lock. While it waits, every later
# lock request on that table (each reader's) queues behind it: the wait is what readers may
# stall, so it is short, and the migration tries again after a pause instead.
LOCK_TIMEOUT_SECONDS = 1.0
LOCK_ATTEMPTS = 10
FIRST_PAUSE_SECONDS = 0.5
LONGEST_PAUSE_SECONDS = 4.0


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def in_transaction(self) -> bool:
        """False for a migration marked `-- migrate: outside a transaction`."""
        return _OUTSIDE_TRANSACTION.search(self.sql) is None


def available() -> list[Migration]:
    folder = resources.files("service.store") / "migrations"
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError("two migrations share a version number")
    return found


async def migrate(
    conn: asyncpg.Connection,
    *,
    migrations: Sequence[Migration] | None = None,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    attempts: int = LOCK_ATTEMPTS,
) -> list[str]:
    """Apply pending migrations (`available()` unless given); return the names applied."""
    applied_now: list[str] = []
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    integer PRIMARY KEY,
                   name       text NOT NULL,
                   checksum   text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
        done = {r["version"]: r for r in rows}
        for mig in available() if migrations is None else migrations:
            prior = done.get(mig.version)
            if prior is not None:
                if prior["checksum"] != mig.checksum:
                    raise MigrationError(
                        f"migration {mig.name} changed after it was applied; add a new one instead"
                    )
                continue
            await _apply_patiently(conn, mig, lock_timeout=lock_timeout, attempts=attempts)
            applied_now.append(mig.name)
    finally:
        if not conn.is_closed():
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now


async def _apply_patiently(
    conn: asyncpg.Connection, mig: Migration, *, lock_timeout: float, attempts: int
) -> None:
    pause = FIRST_PAUSE_SECONDS
    for attempt in range(1, attempts + 1):
        try:
            await _apply(conn, mig, lock_timeout)
            return
        except asyncpg.LockNotAvailableError as err:
            if attempt == attempts:
                raise MigrationError(
                    f"migration {mig.name} waited {attempts} times {lock_timeout:g} s for a "
                    "table lock another session holds (a long transaction?); nothing of it "
                    "was applied: run `elova-mcp migrate` again once it ends"
                ) from err
        await asyncio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_SECONDS)


async def _apply(conn: asyncpg.Connection, mig: Migration, lock_timeout: float) -> None:
    record = "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)"
    if not mig.in_transaction:
        # CREATE INDEX CONCURRENTLY and its kind block neither readers nor writers while
        # they wait, and a lock timeout would leave an invalid index behind: no timeout.
        await conn.execute(mig.sql)
        await conn.execute(record, mig.version, mig.name, mig.checksum)
        return
    async with conn.transaction():
        await conn.execute(
            "SELECT set_config('lock_timeout', $1, true)", f"{round(lock_timeout * 1000)}ms"
        )
        await conn.execute(mig.sql)
        await conn.execute(record, mig.version, mig.name, mig.checksum)
