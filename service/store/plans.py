"""Plans kept by the server through a transaction-mode pooler: a hot statement as a PL/pgSQL
function, whose plan the backend keeps whichever client the pooler hands it to.

`as_function` creates `elova_plan_<hash of the statement>` once and returns the statement
that calls it with the same parameters and columns; where it cannot (no CREATE right, a
read-only standby, a column list a function cannot return) it returns None and the caller
keeps the plain statement. Why, and what was measured: docs/decisions/engines.md,
"Server-side plans for the hot statement".
"""

from __future__ import annotations

import hashlib
import logging

import asyncpg

log = logging.getLogger(__name__)

_REFUSED: set[str] = set()  # statements whose function cannot be made (logged once)
_EXISTS = (asyncpg.DuplicateFunctionError, asyncpg.UniqueViolationError)
_LASTING = (
    asyncpg.InsufficientPrivilegeError,
    asyncpg.ReadOnlySQLTransactionError,
    asyncpg.InvalidFunctionDefinitionError,
    asyncpg.DuplicateColumnError,
    asyncpg.InvalidParameterValueError,
)


async def as_function(conn: asyncpg.Connection, sql: str) -> str | None:
    """The statement calling `sql` as a server-side function, or None (use `sql` itself).
    Another process creating the function at the same moment is fine; a refusal that will
    not change is remembered for the process."""
    if sql in _REFUSED:
        return None
    described = await conn.prepare(sql, name="")
    parameters = [t.name for t in described.get_parameters()]
    columns = ", ".join(f'"{a.name}" {a.type.name}' for a in described.get_attributes())
    name = "elova_plan_" + hashlib.sha256(f"{sql}\0{columns}".encode()).hexdigest()[:24]
    call = f"SELECT * FROM {name}({', '.join(f'${n}' for n in range(1, len(parameters) + 1))})"
    # `use_column`: a column the statement names wins over the output column of that name.
    ddl = (
        f"CREATE FUNCTION {name}({', '.join(parameters)}) RETURNS TABLE({columns})"
        f" LANGUAGE plpgsql STABLE PARALLEL SAFE AS $elova_plan$\n#variable_conflict use_column\n"
        f"BEGIN RETURN QUERY {sql}; END $elova_plan$"
    )
    try:
        await conn.execute(ddl)
    except _EXISTS:
        pass  # made by an earlier start or another replica: the name is the statement's hash
    except _LASTING as err:
        _REFUSED.add(sql)
        log.warning(
            "through the pooler the first-page statement is planned on every call: cannot "
            "create its function (%s); docs/operations.md",
            type(err).__name__,
        )
        return None
    except asyncpg.PostgresError:
        return None  # e.g. a concurrent update of the catalogue: try again next time
    return call
