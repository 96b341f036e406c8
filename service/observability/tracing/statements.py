"""What a PostgreSQL statement's span says: its operation and a summary, `{OPERATION}
{tables}` (`SELECT executions`, `INSERT approval_activity`, `WITH approval_state executions
workflows`: the first five tables or functions it reads from or writes to, in order), read
from the statement's text; the database and the server.

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
# A table (or set-returning function) a statement names: after FROM / INTO / UPDATE / JOIN,
# a plain identifier (a dotted one after FROM is a column: `extract(epoch FROM e.stopped_at)`).
_TARGET = re.compile(r"\b(?:FROM|INTO|UPDATE|JOIN)\s+([A-Za-z_][A-Za-z0-9_]*)\b(?!\.)", re.I)
# A common table expression's name is the statement's own, not a table: left out, as are
# the keywords that may follow FROM or JOIN.
_CTE = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(", re.I)
_LITERAL = re.compile(r"'(?:[^']|'')*'")
_KEYWORDS = frozenset({"lateral", "only", "rows", "select", "values"})
_MOST_TARGETS = 5
_KNOWN = 2048  # summaries remembered (the statements are a fixed set of module texts)
_summaries: dict[str, tuple[str, str]] = {}


def summarize(sql: str) -> tuple[str, str]:
    """(db.operation.name, db.query.summary) of a statement's text."""
    known = _summaries.get(sql)
    if known is not None:
        return known
    found = _OPERATION.match(sql)
    operation = found.group(1).upper() if found else "OTHER"
    targets: list[str] = []
    if operation not in _NO_TARGET:
        code = _LITERAL.sub("''", sql)  # a constant's text is no table
        named = {name.lower() for name in _CTE.findall(code)} | _KEYWORDS
        for found_target in _TARGET.finditer(code):
            name = found_target.group(1).lower()
            if name not in targets and name not in named:
                targets.append(name)
            if len(targets) == _MOST_TARGETS:
                break
    summary = (operation, " ".join((operation, *targets)))
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
