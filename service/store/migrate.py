"""Versioned SQL migrations: plain files `NNNN_name.sql`, applied in order, once each.

Safe to run twice, from several replicas at once, through a transaction-mode pooler and
while the previous release serves: each migration commits on its own under the runner's
advisory lock, `schema_migrations` records what was applied (with a checksum: an edited
migration is refused), a table lock is waited for at most `LOCK_TIMEOUT_SECONDS` before a
pause and a retry, and a file marked `-- migrate: outside a transaction` runs outside a
transaction block. Why each, and the known limit: docs/decisions/migrations.md, "The
runner (service/store/migrate.py)".
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


def release_version() -> int:
    """The schema version this release needs: its newest migration's."""
    return max(m.version for m in available())


async def applied_version(conn: asyncpg.Connection) -> int:
    """The newest migration applied to this database; 0 when `migrate` never ran."""
    if await conn.fetchval("SELECT to_regclass('schema_migrations')") is None:
        return 0
    return int(await conn.fetchval("SELECT coalesce(max(version), 0) FROM schema_migrations"))


async def migrate(
    conn: asyncpg.Connection,
    *,
    migrations: Sequence[Migration] | None = None,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    attempts: int = LOCK_ATTEMPTS,
) -> list[str]:
    """Apply pending migrations (`available()` unless given); return the names applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    integer PRIMARY KEY,
                   name       text NOT NULL,
                   checksum   text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
    applied_now: list[str] = []
    for mig in available() if migrations is None else migrations:
        if await _apply_patiently(conn, mig, lock_timeout=lock_timeout, attempts=attempts):
            applied_now.append(mig.name)
    return applied_now


async def _apply_patiently(
    conn: asyncpg.Connection, mig: Migration, *, lock_timeout: float, attempts: int
) -> bool:
    """Apply one migration unless it is; True when this call applied it."""
    pause = FIRST_PAUSE_SECONDS
    for attempt in range(1, attempts + 1):
        try:
            if mig.in_transaction:
                return await _apply(conn, mig, lock_timeout)
            return await _apply_outside_a_transaction(conn, mig)
        except asyncpg.LockNotAvailableError as err:
            if attempt == attempts:
                raise MigrationError(
                    f"migration {mig.name} waited {attempts} times {lock_timeout:g} s for a "
                    "table lock another session holds (a long transaction?); nothing of it "
                    "was applied: run `elova-mcp migrate` again once it ends"
                ) from err
        await asyncio.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_SECONDS)
    raise AssertionError("unreachable")  # pragma: no cover


# The runner's lock is a transaction's (pg_advisory_xact_lock), taken again for each
# migration: a session lock would not survive a transaction-mode pooler (PgBouncer hands
# each transaction any server connection), and the migrate Job may go through one.
async def _claim(conn: asyncpg.Connection, mig: Migration) -> bool:
    """Inside a transaction: take the runner's lock; False when `mig` is applied already."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
    prior = await conn.fetchval(
        "SELECT checksum FROM schema_migrations WHERE version = $1", mig.version
    )
    if prior is not None and prior != mig.checksum:
        raise MigrationError(
            f"migration {mig.name} changed after it was applied; add a new one instead"
        )
    return prior is None


_RECORD = """INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)
             ON CONFLICT (version) DO NOTHING"""


async def _apply(conn: asyncpg.Connection, mig: Migration, lock_timeout: float) -> bool:
    async with conn.transaction():
        if not await _claim(conn, mig):
            return False
        # Set after the runner's own lock: waiting for another runner is no reader's stall.
        lock_ms = f"{round(lock_timeout * 1000)}ms"
        await conn.execute("SELECT set_config('lock_timeout', $1, true)", lock_ms)
        await conn.execute(mig.sql)
        await conn.execute(_RECORD, mig.version, mig.name, mig.checksum)
    return True


async def _apply_outside_a_transaction(conn: asyncpg.Connection, mig: Migration) -> bool:
    """A `CREATE INDEX CONCURRENTLY` and its kind: no lock timeout (they wait without
    blocking readers or writers, and a timeout would leave an invalid index), no runner's
    lock across the statement (none can be held outside a transaction)."""
    async with conn.transaction():
        if not await _claim(conn, mig):
            return False
    await conn.execute(mig.sql)
    invalid = await conn.fetch(
        """SELECT i.indexrelid::regclass::text AS name FROM pg_index i
             JOIN pg_class c ON c.oid = i.indexrelid
            WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace"""
    )
    if invalid:
        names = ", ".join(r["name"] for r in invalid)
        raise MigrationError(
            f"migration {mig.name}: index {names} is not valid (a concurrent build failed, or "
            f"another session is still building it); once no `migrate` runs, DROP INDEX "
            f"CONCURRENTLY it and run `elova-mcp migrate` again"
        )
    await conn.execute(_RECORD, mig.version, mig.name, mig.checksum)
    return True
