"""`elova-mcp load FILE`: upsert a snapshot file's records in one transaction, then ANALYZE
the tables it wrote (service/store/planner_statistics.py).

Prints a one-line summary and exits 0 (how long the ANALYZE took goes to stderr); a file
that cannot be read or loaded exits 1 with the reason on stderr (a bad record changes
nothing), and so does an ANALYZE that failed after the commit, saying the records are
loaded and what to run. Needs only ELOVA_DATABASE_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import asyncpg

from service.cli.database_command import refuse, run_on_database
from service.config import Config
from service.errors import CommandRefused, LoadError
from service.store import planner_statistics as statistics
from service.store.load_snapshot import load_snapshot

_PROG = "elova-mcp load"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "load",
        help="load a snapshot file of retained records",
        description=(
            "Upsert the records of a snapshot file (one JSON object with the arrays accounts,"
            " workspaces, instances, syncJobs, workflows, executions) in one transaction. A bad"
            " record exits 1 naming the record and the field, and changes nothing."
        ),
        epilog=(
            "Every array and field of the file: docs/snapshot-format.md in the repository;"
            " an example that loads: docs/examples/snapshot.json."
        ),
    )
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
        return refuse(_PROG, f"cannot read {args.file}: {err.strerror or err}")
    name = args.file

    async def command(conn: asyncpg.Connection) -> str:
        try:
            report = await load_snapshot(conn, document, analyze=False)
        except LoadError as err:
            raise CommandRefused(f"{name}: {err} (nothing was changed)") from err
        except asyncpg.UndefinedTableError:
            raise  # answered like every command's missing schema
        except asyncpg.PostgresError as err:
            raise CommandRefused(f"{name}: the database refused the load: {err}") from err
        try:
            analyzed = await statistics.analyze(conn, report.written)
        except asyncpg.PostgresError as err:
            raise CommandRefused(
                f"{name}: {report.summary()}, but updating the planner statistics failed ({err});"
                f" run ANALYZE {', '.join(report.written)}"
            ) from err
        sys.stderr.write(
            f"{_PROG}: planner statistics updated: ANALYZE of {len(analyzed.tables)} tables"
            f" took {analyzed.seconds:.2f} s\n"
        )
        return f"{name}: {report.summary()}"

    return asyncio.run(run_on_database(_PROG, cfg.database_url, command))
