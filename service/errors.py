"""The exception tree and its wire codes: every module raises these, one place answers them.

    ElovaError
    ├── ProtocolError            JSON-RPC error response (code, message, data, HTTP status)
    │   ├── ParseError           -32700, HTTP 400
    │   ├── InvalidRequest       -32600, HTTP 400
    │   │   └── SessionNotFound  -32600, HTTP 404 (2025 revisions: send initialize again)
    │   ├── MethodNotFound       -32601, HTTP 404 (2026-07-28) / 200 with error (sessions)
    │   ├── InvalidParams        -32602, HTTP 200 with error (unknown tool, bad params shape)
    │   ├── HeaderMismatch       -32020, HTTP 400
    │   └── UnsupportedProtocolVersion  -32022, HTTP 400
    ├── AuthError                401 with WWW-Authenticate (missing, invalid or expired token)
    │   └── InsufficientScope    403 insufficient_scope
    │   └── ResponseTooLarge     -32603, HTTP 500: a result over the response bound (a bug)
    ├── LimitExceeded            429 with Retry-After; JSON-RPC error naming the limit
    └── ToolError                a tool result with isError: true, `CODE: message`, _meta
        ├── ValidationError      VALIDATION_ERROR (argument, bound, UUID, zone, cursor)
        ├── NotFound             NOT_FOUND (not granted, or not in that workspace)
        ├── CursorStale          MCP_CURSOR_STALE (fixed text)
        ├── Unavailable          UNAVAILABLE (a dependency is down; retryable)
        └── DeadlineExceeded     DEADLINE_EXCEEDED (retryable)

Foreign exceptions have one table too (`STORE_UNREACHABLE`, `STORE_FAILED`, `DEADLINE`,
`tool_failure`): a tool's read whose connection failed is UNAVAILABLE, one past its deadline
DEADLINE_EXCEEDED; the approval or session store failing is `Unavailable`, answered 503
with Retry-After outside a tool. Anything else is a bug: logged, answered -32603 (HTTP 500).
service/mcp/answers.py turns each of these into the bytes on the wire.

Messages never carry stack traces, SQL, secrets or another tenant's data.
"""

from __future__ import annotations

from typing import Any

import asyncpg

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
# A read cancelled at the request deadline (ours, or PostgreSQL's statement_timeout).
DEADLINE: tuple[type[BaseException], ...] = (TimeoutError, asyncpg.QueryCanceledError)


class ElovaError(Exception):
    """Base of every error this service answers deliberately; `message` is its text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(ElovaError):
    code: int = -32603
    http_status: int = 200

    def __init__(self, message: str, *, data: Any = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.data = data
        if http_status is not None:
            self.http_status = http_status


class ParseError(ProtocolError):
    code = -32700
    http_status = 400


class InvalidRequest(ProtocolError):
    code = -32600
    http_status = 400


class SessionNotFound(InvalidRequest):
    """A 2025-revision session that is unknown, forged, expired or ended."""

    http_status = 404


class MethodNotFound(ProtocolError):
    code = -32601


class InvalidParams(ProtocolError):
    code = -32602


class ResponseTooLarge(ProtocolError):
    """A result over the response bound that the tool could not shorten (a bug: logged)."""

    http_status = 500


class HeaderMismatch(ProtocolError):
    code = -32020
    http_status = 400


class UnsupportedProtocolVersion(ProtocolError):
    code = -32022
    http_status = 400


class AuthError(ElovaError):
    """401: the bearer token is missing, malformed, expired or no longer backed by an approval."""

    status = 401
    error = "invalid_token"

    def __init__(self, description: str, *, error: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        if error is not None:
            self.error = error


class InsufficientScope(AuthError):
    status = 403
    error = "insufficient_scope"

    def __init__(self, description: str, *, required_scope: str) -> None:
        super().__init__(description)
        self.required_scope = required_scope


class LimitExceeded(ElovaError):
    """429: over a concurrency cap or a rate budget. `limit` names which one."""

    def __init__(
        self,
        limit: str,
        retry_after_seconds: int,
        message: str | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message or f"Too many requests: the {limit} limit is reached")
        self.limit = limit
        self.retry_after_seconds = max(1, int(retry_after_seconds))
        self.headers = headers or {}  # e.g. RateLimit-Policy / RateLimit for the 429


class ToolError(ElovaError):
    """A tool that cannot answer: `CODE: message` text plus machine-readable _meta."""

    code: str = "INTERNAL"
    retryable: bool = False

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        retry_after_seconds: int | None = None,
    ) -> None:
        super().__init__(message)
        self.hint = hint
        self.retry_after_seconds = retry_after_seconds

    @property
    def text(self) -> str:
        return f"{self.code}: {self.message}"

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code,
            "message": self.message,
            "retryable": self.retryable,
        }
        if self.hint is not None:
            out["hint"] = self.hint
        if self.retry_after_seconds is not None:
            out["retryAfterSeconds"] = self.retry_after_seconds
        return out


class ValidationError(ToolError):
    code = "VALIDATION_ERROR"


class NotFound(ToolError):
    code = "NOT_FOUND"


STALE_CURSOR_MESSAGE = "Read settings changed. Restart without a cursor."


class CursorStale(ToolError):
    code = "MCP_CURSOR_STALE"

    def __init__(self) -> None:
        super().__init__(
            STALE_CURSOR_MESSAGE, hint="Call the tool again with the same filters and no cursor."
        )


class Unavailable(ToolError):
    code = "UNAVAILABLE"
    retryable = True


class DeadlineExceeded(ToolError):
    code = "DEADLINE_EXCEEDED"
    retryable = True


def tool_failure(err: BaseException, deadline_seconds: float) -> ToolError | None:
    """The tool error for a foreign exception a tool's reads raised, or None (a bug)."""
    if isinstance(err, DEADLINE):
        return DeadlineExceeded(
            f"The request did not finish within {deadline_seconds:g} seconds.",
            hint="Retry, or narrow the request (a smaller limit or period).",
        )
    if isinstance(err, STORE_UNREACHABLE):
        return Unavailable(
            "The record store is unavailable right now.",
            hint="Retry the same read shortly.",
            retry_after_seconds=1,
        )
    return None
