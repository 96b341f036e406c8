"""`elova-mcp migrate`: apply the versioned SQL migrations (safe twice, safe concurrently)."""

from __future__ import annotations

import argparse
import asyncio

import asyncpg

from service.cli.database_command import run_on_database
from service.config import Config
from service.errors import MigrationError
from service.store.migrate import migrate

_PROG = "elova-mcp migrate"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("migrate", help="apply pending database migrations")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env(need_key=False)

    async def command(conn: asyncpg.Connection) -> str:
        applied = await migrate(conn)
        return "applied: " + ", ".join(applied) if applied else "database is up to date"

    return asyncio.run(
        run_on_database(_PROG, cfg.database_url, command, refusals=(MigrationError,))
    )
