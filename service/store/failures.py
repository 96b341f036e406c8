"""What the store's foreign failures mean to a caller: one table of asyncpg's exceptions and
timeouts, mapped onto service/errors.py.

A tool's read whose connection failed is UNAVAILABLE, one past its deadline
DEADLINE_EXCEEDED, one PostgreSQL refused for its characters VALIDATION_ERROR
(`tool_failure`); the approval or session store failing (`STORE_FAILED`) is `Unavailable`,
answered 503 with Retry-After outside a tool; a statement refused for its characters
outside a tool (`NOT_TEXT`) is bad input, a 400 (service/server/error_answers.py).
"""

from __future__ import annotations

import asyncpg

from service.errors import DeadlineExceeded, ToolError, Unavailable, ValidationError

# The connection to PostgreSQL failing (not a query): the read can be retried. A restart
# also shows as the server ending sessions (OperatorInterventionError: admin or crash
# shutdown, cannot connect now) and as asyncpg's InternalClientError when the pool resets a
# connection the server already dropped.
STORE_UNREACHABLE: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,
    asyncpg.InternalClientError,
    asyncpg.TooManyConnectionsError,
)
# Any failure of a store read outside a tool (the approval, a session): 503, retry shortly.
STORE_FAILED: tuple[type[BaseException], ...] = (
    *STORE_UNREACHABLE,
    TimeoutError,
    asyncpg.PostgresError,
)
# PostgreSQL refused a statement for its characters (a NUL, or text the encoding cannot
# hold): bad input that slipped past the checks of service/edge/text_rule.py, never a 500.
NOT_TEXT: tuple[type[BaseException], ...] = (
    asyncpg.CharacterNotInRepertoireError,
    asyncpg.UntranslatableCharacterError,
)
# A read cancelled at the request deadline (ours, or PostgreSQL's statement_timeout).
DEADLINE: tuple[type[BaseException], ...] = (TimeoutError, asyncpg.QueryCanceledError)


def tool_failure(err: BaseException, deadline_seconds: float) -> ToolError | None:
    """The tool error for a foreign exception a tool's reads raised, or None (a bug)."""
    if isinstance(err, DEADLINE):
        return DeadlineExceeded(
            f"The request did not finish within {deadline_seconds:g} seconds.",
            hint="Retry, or narrow the request (a smaller limit or period).",
        )
    if isinstance(err, NOT_TEXT):
        return ValidationError(
            "An argument is not text the record store can read (a NUL or a bad character).",
            hint="Remove NUL (U+0000) and unpaired surrogates from the arguments.",
        )
    if isinstance(err, STORE_UNREACHABLE):
        return Unavailable(
            "The record store is unavailable right now.",
            hint="Retry the same read shortly.",
            retry_after_seconds=1,
        )
    return None
