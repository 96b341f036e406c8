"""`elova-mcp load FILE`: upsert a snapshot file's records in one transaction.

Prints a one-line summary and exits 0; a file that cannot be read or loaded exits 1 with
the reason on stderr (a bad record changes nothing). Needs only ELOVA_DATABASE_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

from service.config import Config
from service.store.loading import LoadError
from service.store.snapshot import load_snapshot

_PROG = "elova-mcp load"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("load", help="load a snapshot file of retained records")
    parser.add_argument("file", metavar="FILE", help="snapshot JSON file ('-' reads stdin)")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env(need_key=False)
    try:
        if args.file == "-":
            document = sys.stdin.buffer.read()
        else:
            with open(args.file, "rb") as handle:
                document = handle.read()
    except OSError as err:
        sys.stderr.write(f"{_PROG}: cannot read {args.file}: {err.strerror or err}\n")
        return 1
    return asyncio.run(_run(cfg.database_url, args.file, document))


async def _run(dsn: str, name: str, document: bytes) -> int:
    try:
        conn = await asyncpg.connect(dsn)
    except (OSError, asyncpg.PostgresError) as err:
        sys.stderr.write(f"{_PROG}: cannot reach PostgreSQL: {err}\n")
        return 1
    try:
        report = await load_snapshot(conn, document)
    except LoadError as err:
        sys.stderr.write(f"{_PROG}: {name}: {err} (nothing was changed)\n")
        return 1
    except asyncpg.UndefinedTableError:
        sys.stderr.write(f"{_PROG}: the database has no schema; run `elova-mcp migrate`\n")
        return 1
    except asyncpg.PostgresError as err:
        sys.stderr.write(f"{_PROG}: {name}: the database refused the load: {err}\n")
        return 1
    finally:
        await conn.close()
    sys.stdout.write(f"{name}: {report.summary()}\n")
    return 0
