"""Planner statistics after a load: which tables a load's transaction wrote, and ANALYZE of
exactly those once it committed (docs/operations.md, "Loading snapshots while serving").

Nothing may wait for autovacuum: it may be off, and it never analyses a table whose change
stays under its threshold (an incremental load under 10 % of `executions`). Until the
tables are analysed, the first-page statements plan from the counts of an empty or much
smaller table and cost several times what they should.

`tables_written` asks PostgreSQL, inside the load's transaction, which of the database's
own tables it inserted into, updated or deleted from (pg_stat_xact_user_tables: this
transaction's counts, temporary tables left out), so the list follows the loader whatever
record family it learns to write. `analyze` runs one ANALYZE of those tables after the
commit, outside any transaction block: PostgreSQL then analyses each table in a transaction
of its own, holding its SHARE UPDATE EXCLUSIVE lock (which no reader or writer of rows
conflicts with) only while it samples that table. Its cost is bounded by the sample
(300 × default_statistics_target rows a table), not by the table's size. One bare statement,
no session state: it works the same through a transaction-mode pooler.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

_WRITTEN = """
SELECT format('%I.%I', s.schemaname, s.relname) AS name
  FROM pg_stat_xact_user_tables s JOIN pg_class c ON c.oid = s.relid
 WHERE c.relpersistence = 'p' AND s.n_tup_ins + s.n_tup_upd + s.n_tup_del > 0
 ORDER BY 1
"""

_QUALIFIED = """
SELECT format('%I.%I', n.nspname, c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.oid = to_regclass($1)
"""


@dataclass(frozen=True)
class Analyzed:
    """The tables one ANALYZE covered (schema-qualified, sorted) and how long it took."""

    tables: tuple[str, ...] = ()
    seconds: float = 0.0


async def tables_written(conn: asyncpg.Connection) -> tuple[str, ...]:
    """The permanent tables the current transaction has written so far (call it last,
    inside the transaction), schema-qualified and quoted, sorted."""
    if not conn.is_in_transaction():
        raise RuntimeError("tables_written reads the current transaction's counts")
    return tuple(row["name"] for row in await conn.fetch(_WRITTEN))


async def qualified(conn: asyncpg.Connection, names: Sequence[str]) -> tuple[str, ...]:
    """Table names as the search path resolves them, schema-qualified and quoted, sorted
    (for writers that list their tables instead of asking `tables_written`)."""
    found = set()
    for name in names:
        value = await conn.fetchval(_QUALIFIED, name)
        if value is None:
            raise LookupError(f"no table {name}")
        found.add(str(value))
    return tuple(sorted(found))


async def analyze(conn: asyncpg.Connection, tables: Sequence[str]) -> Analyzed:
    """One ANALYZE of `tables` (names from `tables_written` or `qualified`: catalog names,
    already quoted), to run after the load committed. (Inside a caller's transaction it
    still works, but holds each table's lock and hides the statistics until that commits.)"""
    names = tuple(sorted(set(tables)))
    if not names:
        return Analyzed()
    started = time.monotonic()
    await conn.execute("ANALYZE " + ", ".join(names))
    return Analyzed(names, time.monotonic() - started)
