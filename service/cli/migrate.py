"""`elova-mcp migrate`: apply the versioned SQL migrations (safe twice, safe concurrently)."""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

from service.config import Config
from service.store.migrate import MigrationError, migrate


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("migrate", help="apply pending database migrations")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env(need_key=False)
    return asyncio.run(_run(cfg.database_url))


async def _run(dsn: str) -> int:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as err:
        print(f"elova-mcp migrate: cannot reach PostgreSQL: {err}", file=sys.stderr)
        return 1
    try:
        applied = await migrate(conn)
    except MigrationError as err:
        print(f"elova-mcp migrate: {err}", file=sys.stderr)
        return 1
    finally:
        await conn.close()
    print("applied: " + ", ".join(applied) if applied else "database is up to date")
    return 0
