"""Migrations apply once, in order, and are safe to run twice or concurrently; a migration
waiting for a table lock lets readers pass (docs/decisions/migrations.md)."""

from __future__ import annotations

import asyncio
import secrets
import time

import asyncpg
import pytest

from service.errors import MigrationError
from service.store.migrate import Migration, available, migrate
from tests.support.services import TestDatabase, create_database, drop_database


async def test_migrate_twice_and_concurrently_is_safe() -> None:
    db: TestDatabase = await create_database("elova_mig")
    try:
        conns = [await asyncpg.connect(db.dsn) for _ in range(3)]
        try:
            results = await asyncio.gather(*(migrate(c) for c in conns))
            assert all(r == [] for r in results)  # create_database already migrated
            count = await conns[0].fetchval("SELECT count(*) FROM schema_migrations")
            assert count == len(available())
        finally:
            for c in conns:
                await c.close()
    finally:
        await drop_database(db)


async def test_fresh_database_concurrent_runners_apply_each_migration_once() -> None:
    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"elova_mig_fresh_{secrets.token_hex(4)}"  # unique across concurrent runs
    await admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    try:
        dsn = f"postgresql://postgres@127.0.0.1:5432/{name}"
        conns = [await asyncpg.connect(dsn) for _ in range(3)]
        try:
            results = await asyncio.gather(*(migrate(c) for c in conns))
            applied = sorted(n for r in results for n in r)
            assert applied == sorted(m.name for m in available())
        finally:
            for c in conns:
                await c.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _empty_database() -> tuple[asyncpg.Connection, str, str]:
    """(admin connection, name, dsn) of a new database nothing has migrated."""
    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"elova_mig_locks_{secrets.token_hex(4)}"
    await admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    return admin, name, f"postgresql://postgres@127.0.0.1:5432/{name}"


PROBE = [Migration(9001, "9001_probe.sql", "ALTER TABLE probe ADD COLUMN note text")]


async def test_a_migration_waiting_for_a_lock_does_not_stall_readers() -> None:
    """A long transaction holds the table: the migration gives up its place in the lock
    queue after its lock timeout, so readers keep reading, and applies once the holder ends."""
    admin, name, dsn = await _empty_database()
    try:
        holder, runner, reader = [await asyncpg.connect(dsn) for _ in range(3)]
        await holder.execute(
            "CREATE TABLE probe (id int PRIMARY KEY); INSERT INTO probe VALUES (1)"
        )
        holding = holder.transaction()
        await holding.start()
        await holder.fetchval("SELECT count(*) FROM probe")  # ACCESS SHARE until it ends
        migrating = asyncio.create_task(
            migrate(runner, migrations=PROBE, lock_timeout=0.2, attempts=30)
        )
        waits = []
        started = time.monotonic()
        while time.monotonic() - started < 2.0:
            t0 = time.monotonic()
            assert await reader.fetchval("SELECT count(*) FROM probe") == 1
            waits.append(time.monotonic() - t0)
            await asyncio.sleep(0.02)
        assert not migrating.done()
        await holding.rollback()
        assert await asyncio.wait_for(migrating, 10) == ["9001_probe.sql"]
        assert await reader.fetchval("SELECT count(*) FROM probe WHERE note IS NULL") == 1
        # Without a lock timeout the first reader after the migration would have waited
        # the holder's 2 s; with it, a reader waits at most about 0.2 s.
        assert max(waits) < 1.0, max(waits)
        for conn in (holder, runner, reader):
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_a_migration_that_never_gets_its_lock_is_refused_and_applies_nothing() -> None:
    admin, name, dsn = await _empty_database()
    try:
        holder, runner = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
        await holder.execute("CREATE TABLE probe (id int PRIMARY KEY)")
        async with holder.transaction():
            await holder.fetchval("SELECT count(*) FROM probe")
            with pytest.raises(MigrationError, match="9001_probe.sql waited 3 times"):
                await migrate(runner, migrations=PROBE, lock_timeout=0.1, attempts=3)
        assert await runner.fetchval("SELECT count(*) FROM schema_migrations") == 0
        columns = await runner.fetchval(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'probe'"
        )
        assert columns == 1
        # Nothing is left holding the runner's lock: another runner goes ahead at once.
        other = await asyncpg.connect(dsn)
        assert await asyncio.wait_for(migrate(other, migrations=PROBE), 5) == ["9001_probe.sql"]
        for conn in (holder, runner, other):
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def test_a_migration_marked_outside_a_transaction_can_build_an_index_concurrently() -> None:
    admin, name, dsn = await _empty_database()
    try:
        conn = await asyncpg.connect(dsn)
        await conn.execute("CREATE TABLE probe (id int PRIMARY KEY, note text)")
        sql = "CREATE INDEX CONCURRENTLY probe_note ON probe (note);\n"
        inside = Migration(9002, "9002_probe_note.sql", sql)
        with pytest.raises(asyncpg.ActiveSQLTransactionError):
            await migrate(conn, migrations=[inside])
        outside = Migration(
            9002, "9002_probe_note.sql", "-- migrate: outside a transaction\n" + sql
        )
        assert not outside.in_transaction and inside.in_transaction
        assert await migrate(conn, migrations=[outside]) == ["9002_probe_note.sql"]
        valid = await conn.fetchval(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = 'probe_note'::regclass"
        )
        assert valid is True
        # A build that fails leaves an invalid index: the next run says so, records nothing.
        await conn.execute("INSERT INTO probe VALUES (1, 'same'), (2, 'same')")
        unique = Migration(
            9003,
            "9003_probe_unique.sql",
            "-- migrate: outside a transaction\n"
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS probe_once ON probe (note);\n",
        )
        with pytest.raises(asyncpg.UniqueViolationError):
            await migrate(conn, migrations=[unique])
        with pytest.raises(MigrationError, match="index probe_once is not valid"):
            await migrate(conn, migrations=[unique])
        assert await conn.fetchval("SELECT count(*) FROM schema_migrations") == 1
        await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
