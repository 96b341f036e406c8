"""Planner statistics after a load: which tables a load's transaction wrote
(`tables_written`, asked of PostgreSQL inside the transaction), and one ANALYZE of exactly
those once it committed (`analyze`; docs/operations.md, "Loading snapshots while serving").

Why not autovacuum, why after the commit, why the list comes from PostgreSQL and what it
costs: docs/decisions/loads.md.
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
