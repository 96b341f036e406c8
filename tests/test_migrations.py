"""Migrations apply once, in order, and are safe to run twice or concurrently."""

from __future__ import annotations

import asyncio

import asyncpg

from service.store.migrate import available, migrate
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
    name = "elova_mig_fresh_" + str(id(admin))
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
