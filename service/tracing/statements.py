"""What a PostgreSQL statement's span says: its operation and a summary, `{OPERATION}
{first table}` (`SELECT executions`, `INSERT approval_activity`), read from the statement's
text, the database and the server.

Every statement of the service is text of a store module with its values bound as $n
(docs/architecture.md, SQL is SQL), so the summary holds only names the module wrote; the
text itself (`db.query.text`) is left out all the same: some statements carry constants of
the configuration (SET LOCAL statement_timeout) and the hot ones are kilobytes long. Bound
arguments never reach a span.
"""

from __future__ import annotations

import re
from typing import Any

_OPERATION = re.compile(r"\s*(?:--[^\n]*\n\s*|/\*.*?\*/\s*)*([A-Za-z]+)", re.S)
# The first table a statement names: after FROM / INTO / UPDATE / JOIN, a plain identifier
# (a dotted one after FROM is a column: `extract(epoch FROM e.stopped_at)`).
_TARGET = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)\b(?!\.)", re.I)
_KNOWN = 2048  # summaries remembered (the statements are a fixed set of module texts)
_summaries: dict[str, tuple[str, str]] = {}


def summarize(sql: str) -> tuple[str, str]:
    """(db.operation.name, db.query.summary) of a statement's text."""
    known = _summaries.get(sql)
    if known is not None:
        return known
    found = _OPERATION.match(sql)
    operation = found.group(1).upper() if found else "OTHER"
    target = _TARGET.search(sql) if operation not in _NO_TARGET else None
    summary = (operation, f"{operation} {target.group(1)}" if target else operation)
    if len(_summaries) < _KNOWN:
        _summaries[sql] = summary
    return summary


_NO_TARGET = frozenset({"BEGIN", "COMMIT", "ROLLBACK", "SET", "RESET", "SAVEPOINT", "RELEASE"})


def statement_attributes(sql: str, address: Any, params: Any) -> tuple[str, dict[str, str | int]]:
    """The span name and attributes of one statement run on `address` (asyncpg's conn_addr:
    (host, port) or a socket path) with `params` (its conn_params)."""
    operation, summary = summarize(sql)
    attributes: dict[str, str | int] = {
        "db.system.name": "postgresql",
        "db.operation.name": operation,
        "db.query.summary": summary,
    }
    database = getattr(params, "database", None)
    if database:
        attributes["db.namespace"] = str(database)
    if isinstance(address, tuple) and len(address) >= 2:
        attributes["server.address"], attributes["server.port"] = str(address[0]), int(address[1])
    elif isinstance(address, str):
        attributes["server.address"] = address
    return summary, attributes
