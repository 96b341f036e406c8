"""Every statement of one answer reads the same view of the records: one MVCC snapshot, in
PostgreSQL's word (in this project's words a snapshot is the file a load reads).

A tool that answers from one statement needs nothing: PostgreSQL runs a statement on one
snapshot. A tool that needs several (the scope, then the rows) runs them in one REPEATABLE
READ, READ ONLY transaction, so that a load committing between them (one transaction of its
own, service/store/load_snapshot.py) cannot give an answer whose coverage or read generation is
the old snapshot's and whose rows are the new one's. Through a transaction-mode pooler the
transaction also keeps the statements on one server connection.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager, nullcontext

import asyncpg
from asyncpg.transaction import Transaction


def same_view(conn: asyncpg.Connection) -> Transaction:
    """`async with same_view(conn):` around the statements of one answer."""
    return conn.transaction(isolation="repeatable_read", readonly=True)


def same_view_unless(
    one_statement: bool, conn: asyncpg.Connection
) -> AbstractAsyncContextManager[object]:
    """`same_view(conn)`, or nothing when the answer is read by one statement."""
    return nullcontext() if one_statement else same_view(conn)
