"""Versioned SQL migrations: plain files `NNNN_name.sql`, applied in order, once each.

Safe to run twice or from several replicas at once: a transaction-level advisory lock
serialises runners, and `schema_migrations` records what was applied (with a checksum,
so an edited migration is refused instead of silently skipped).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from service.errors import MigrationError

_LOCK_KEY = 0x656C6F7661  # "elova": one advisory lock for the migration runner
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


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


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply pending migrations; return the names applied by this call."""
    applied_now: list[str] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    integer PRIMARY KEY,
                   name       text NOT NULL,
                   checksum   text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
        done = {r["version"]: r for r in rows}
        for mig in available():
            prior = done.get(mig.version)
            if prior is not None:
                if prior["checksum"] != mig.checksum:
                    raise MigrationError(
                        f"migration {mig.name} changed after it was applied; add a new one instead"
                    )
                continue
            await conn.execute(mig.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                mig.version,
                mig.name,
                mig.checksum,
            )
            applied_now.append(mig.name)
    return applied_now
