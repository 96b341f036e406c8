"""What the database commands (migrate, load, approve, account) share; not a command itself.

Each of them opens one PostgreSQL connection for its run, prints its result on stdout, and
answers every failure with one line `<command>: <reason>` on stderr, never a traceback
(`run_on_database`, `refuse`; docs/decisions/cleanup.md).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import asyncpg

from service.cli.failures import report
from service.cli.preflight import connect_postgresql
from service.errors import CommandRefused, StartupFailure

NO_SCHEMA = "the database has no schema yet; run `elova-mcp migrate`"


def refuse(prog: str, message: str, status: int = 1) -> int:
    """Say why on stderr; the exit status to return."""
    sys.stderr.write(f"{prog}: {message}\n")
    return status


async def run_on_database(
    prog: str,
    dsn: str,
    command: Callable[[asyncpg.Connection], Awaitable[str]],
    *,
    refusals: tuple[type[Exception], ...] = (),
) -> int:
    """Run `command` on a fresh connection and print the text it returns. A `CommandRefused`, or an
    exception of a `refusals` type, prints its message as is. The failures (exit status 1
    unless said otherwise):

        cannot connect             what PostgreSQL refused, and the fix (service/cli/failures.py;
                                   exit 2 for a setting to change, 1 for PostgreSQL down)
        a refusal the command names  its message, for a person
        no tables yet              the database has no schema yet; run `elova-mcp migrate`
        any other database error   database error: <its type> (no SQL, no values)
    """
    refused: tuple[type[Exception], ...] = (CommandRefused, *refusals)
    try:
        conn = await connect_postgresql(dsn)
    except StartupFailure as failure:
        return report(prog, failure)
    try:
        out = await command(conn)
    except refused as err:
        return refuse(prog, str(err), getattr(err, "exit_status", 1))
    except asyncpg.UndefinedTableError:
        return refuse(prog, NO_SCHEMA)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
        return refuse(prog, f"database error: {type(err).__name__}")
    finally:
        await conn.close()
    sys.stdout.write(out + "\n")
    return 0
