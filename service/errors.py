"""Every exception this service raises on purpose; each class says what it answers on the wire.

    ElovaError                   what /mcp answers, plus the approval refusals
    ├── ProtocolError            a JSON-RPC error: ParseError, InvalidRequest, MethodNotFound, …
    ├── AuthError                401 / 403 with WWW-Authenticate: InsufficientScope, InvalidToken
    ├── LimitExceeded            429 with Retry-After
    ├── ToolError                a tool result with isError: ValidationError, NotFound, …
    └── ApprovalRefused, GrantRefused, ScopeRefused: approvals, the refresh grant

Beside it, never answered on /mcp: OAuth, configuration, command and load errors (below).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class ElovaError(Exception):
    """Base of every error this service answers deliberately; `message` is its text.

    The store's foreign exceptions (asyncpg's, timeouts) are mapped onto this tree beside
    the store, in service/store/failures.py. Anything else is a bug: logged, answered -32603
    (HTTP 500). service/mcp/error_boundary.py turns each of these into the bytes on the
    wire. Messages never carry stack traces, SQL, secrets or another tenant's data."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProtocolError(ElovaError):
    """A JSON-RPC error response: `code`, the message, `data` and its HTTP status (200
    unless the class or the raiser names another)."""

    code: int = -32603
    http_status: int = 200

    def __init__(self, message: str, *, data: Any = None, http_status: int | None = None) -> None:
        super().__init__(message)
        self.data = data
        if http_status is not None:
            self.http_status = http_status


class ParseError(ProtocolError):
    """-32700, HTTP 400."""

    code = -32700
    http_status = 400


class InvalidRequest(ProtocolError):
    """-32600, HTTP 400."""

    code = -32600
    http_status = 400


class SessionNotFound(InvalidRequest):
    """A 2025-revision session that is unknown, forged, expired or ended: -32600, HTTP 404
    (the client sends initialize again)."""

    http_status = 404


class MethodNotFound(ProtocolError):
    """-32601: HTTP 404 on 2026-07-28, HTTP 200 with the error in sessions."""

    code = -32601


class InvalidParams(ProtocolError):
    """-32602, HTTP 200 with the error: an unknown tool, a bad params shape."""

    code = -32602


class ResponseTooLarge(ProtocolError):
    """A result over the response bound that the tool could not shorten (a bug: logged):
    -32603, HTTP 500."""

    http_status = 500


class HeaderMismatch(ProtocolError):
    """-32020, HTTP 400."""

    code = -32020
    http_status = 400


class UnsupportedProtocolVersion(ProtocolError):
    """-32022, HTTP 400."""

    code = -32022
    http_status = 400


class AuthError(ElovaError):
    """401 with WWW-Authenticate: the bearer token is missing, malformed, expired or no
    longer backed by an approval."""

    status = 401
    error = "invalid_token"

    def __init__(self, description: str, *, error: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        if error is not None:
            self.error = error


class InsufficientScope(AuthError):
    """403 insufficient_scope."""

    status = 403
    error = "insufficient_scope"

    def __init__(self, description: str, *, required_scope: str) -> None:
        super().__init__(description)
        self.required_scope = required_scope


class InvalidToken(AuthError):
    """A bearer token that does not verify (raised by service/auth/tokens.py); `reason` is
    the metrics label of the failure."""

    def __init__(self, description: str, *, reason: str, error: str | None = None) -> None:
        super().__init__(description, error=error)
        self.reason = reason


class LimitExceeded(ElovaError):
    """429 with Retry-After: over a concurrency cap or a rate budget. `limit` names which
    one, in the JSON-RPC error too."""

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
    """A tool that cannot answer: a tool result with isError: true, `CODE: message` text
    plus machine-readable _meta."""

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
    """VALIDATION_ERROR: an argument, a bound, a UUID, a zone or a cursor."""

    code = "VALIDATION_ERROR"


class NotFound(ToolError):
    """NOT_FOUND: not granted, or not in that workspace."""

    code = "NOT_FOUND"


STALE_CURSOR_MESSAGE = "Read settings changed. Restart without a cursor."


class CursorStale(ToolError):
    """MCP_CURSOR_STALE, with a fixed text."""

    code = "MCP_CURSOR_STALE"

    def __init__(self) -> None:
        super().__init__(
            STALE_CURSOR_MESSAGE, hint="Call the tool again with the same filters and no cursor."
        )


class Unavailable(ToolError):
    """UNAVAILABLE: a dependency is down (retryable)."""

    code = "UNAVAILABLE"
    retryable = True

    @property
    def retry_after(self) -> int:
        """The Retry-After of its 503: the seconds it names, else 1."""
        return self.retry_after_seconds or 1


class AuditUnavailable(Unavailable):
    """The audit queue stayed full past ELOVA_AUDIT_WAIT_SECONDS (the sink is down or too
    slow; service/audit/writer.py): the request that needed a line is answered 503, never
    without its line."""

    def __init__(self) -> None:
        super().__init__("the audit trail is not keeping up; retry shortly", retry_after_seconds=1)


class DeadlineExceeded(ToolError):
    """DEADLINE_EXCEEDED (retryable)."""

    code = "DEADLINE_EXCEEDED"
    retryable = True


# Approvals (service/auth/approvals.py) ---------------------------------------------------


class ApprovalRefused(ElovaError):
    """An approval that cannot be granted as asked (approvals.py, the approval form,
    `elova-mcp approve`); the message says why, for a person."""


class ApprovalLimitReached(ApprovalRefused):
    """The account already has the most active approvals; one must be revoked first."""


class FieldRefused(ApprovalRefused):
    """A refusal about one choice of the approval form (shown next to it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class GrantRefused(ElovaError):
    """A refresh token that buys nothing (OAuth `invalid_grant`)."""

    error = "invalid_grant"


class RefreshReused(GrantRefused):
    """A used refresh token presented again: its approval (the token family) was revoked
    (audited)."""

    def __init__(self, message: str, approval_id: Any) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ScopeRefused(ElovaError):
    """A refresh that asks for a scope the approval does not grant (OAuth `invalid_scope`)."""

    error = "invalid_scope"


# The authorization server (service/auth/oauth/) -------------------------------------------


class OAuthError(Exception):
    """An OAuth error answered as JSON (RFC 6749 §5.2): `error`, `error_description`, HTTP
    status."""

    def __init__(self, error: str, description: str, *, status: int = 400) -> None:
        super().__init__(description)
        self.error = error
        self.description = description
        self.status = status
        self.headers: dict[str, str] = {}


class RegistrationRefused(OAuthError):
    """A refused registration (POST /register); `reason` is its metrics label (rate, size,
    host, …)."""

    def __init__(self, reason: str, error: str, description: str, *, status: int = 400) -> None:
        super().__init__(error, description, status=status)
        self.reason = reason


class ClientGone(Exception):
    """The approval's client was deleted (never used: service/auth/clients/retention.py)
    between the page's checks and the approval's transaction."""


class PageRefusal(Exception):
    """/authorize, shown to the person on a page: the client or redirect URI is unknown, so
    it cannot be trusted with an answer."""

    def __init__(self, title: str, message: str) -> None:
        super().__init__(message)
        self.title = title
        self.message = message


class RedirectRefusal(Exception):
    """/authorize: sent back to the (registered) redirect URI as an OAuth error
    (`service.auth.oauth.authorization_requests.refusal_location` builds the URL)."""

    def __init__(self, redirect_uri: str, state: str | None, error: str, description: str) -> None:
        super().__init__(description)
        self.redirect_uri = redirect_uri
        self.state = state
        self.error = error
        self.description = description


class FetchRefused(Exception):
    """A Client ID Metadata Document that cannot be fetched or is not acceptable; the
    message says why (shown to the person on the error page, never to the document's
    server). `transient`: the host did not answer (timeout, unreachable, 5xx), as opposed
    to an answer that is refused."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class PrivateAddress(OSError):
    """Raised by the metadata-document resolver: the name has an address the fetch may not
    connect to."""


# Configuration and the operator commands (service/config.py, service/cli/) -------------


class ConfigError(ValueError):
    """A setting is missing or malformed (raised by service/config.py); the message names
    the variable."""


@dataclass
class StartupFailure(Exception):
    """A start that cannot go on; `message` is the whole line after the command name,
    `status` the exit status (made and written by service/cli/failures.py)."""

    message: str
    status: int

    def __str__(self) -> str:
        return self.message


class CommandRefused(Exception):
    """A database command's refusal, its message written for a person."""


class IdpRefused(CommandRefused):
    """`elova-mcp idp`: an issuer, key-set URL, domain or option it does not take, a
    duplicate, or no such IdP (exit status 2: the input is to change)."""

    exit_status = 2


class AccountRefused(CommandRefused):
    """`elova-mcp account`: a password, email or name it does not take, or no such account."""


class DemoStartFailed(RuntimeError):
    """`elova-mcp run-demo` could not migrate, load or approve; the message says why."""


# Records: migrations and snapshot loading (service/store/) ------------------------------


class MigrationError(RuntimeError):
    """A migration whose file changed after it was applied."""


class LoadError(ValueError):
    """A snapshot that cannot be loaded. Nothing is changed when this is raised.

    `record` is e.g. "executions[12] (id 44444444-…)", `field` e.g. "startedAt".
    """

    def __init__(self, record: str, field: str, message: str) -> None:
        self.record = record
        self.field = field
        self.message = message
        where = f"{record}: {field}" if field else record
        super().__init__(f"{where}: {message}")


# The demo (service/demo/) ---------------------------------------------------------------


class BulkRefused(Exception):
    """`elova-mcp demo-data`: the bulk plan cannot be written (its records already exist,
    or no schema)."""


class EmbeddedUnavailable(RuntimeError):
    """The embedded PostgreSQL (`make run`) could not be started; the message says what to
    do."""
