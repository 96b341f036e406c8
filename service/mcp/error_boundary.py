"""The one error boundary of `/mcp`: every exception becomes the answer on the wire here.

    ProtocolError        its JSON-RPC code and HTTP status (-32603 ones: 500, logged)
    AuthError            401 / 403, JSON-RPC 401 / 403, WWW-Authenticate challenge
    LimitExceeded        429, JSON-RPC 429 with the limit, Retry-After and RateLimit headers
    Unavailable          503, JSON-RPC -32600 "Service Unavailable: …", Retry-After
    STORE_FAILED         (asyncpg, OSError, timeouts outside a tool) as Unavailable
    anything else        500, JSON-RPC -32603 "Internal error", logged with the request id

Tool errors are results, not errors: service/mcp/tools_call.py shapes them.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.hdrs import RETRY_AFTER, WWW_AUTHENTICATE

from service.app_keys import CONFIG, METRICS
from service.auth.bearer import auth_reason, challenge
from service.errors import AuthError, LimitExceeded, ProtocolError, Unavailable
from service.mcp import protocol as p
from service.mcp.rpc import Answer
from service.store.failures import STORE_FAILED

log = logging.getLogger(__name__)

STORE_UNAVAILABLE = "retry shortly"


def failure(
    app: web.Application, request_id: str, rpc_id: p.RequestId | None, err: BaseException
) -> Answer:
    """The answer for `err`, raised while answering JSON-RPC request `rpc_id`. A tool's
    own ToolError, and its reads' foreign failures (through `tool_failure`,
    service/store/failures.py), are tool results that tools_call.py shapes instead."""
    if isinstance(err, ProtocolError):
        return protocol_error(rpc_id, err)
    if isinstance(err, AuthError):
        app[METRICS].auth_failed(auth_reason(err))
        code = p.FORBIDDEN if err.status == 403 else p.UNAUTHORIZED
        headers: dict[str, str] = {WWW_AUTHENTICATE: challenge(err, app[CONFIG])}
        return Answer(
            p.error_body(rpc_id, code, err.description), err.status, headers, "auth_error",
            rpc_code=code,
        )  # fmt: skip
    if isinstance(err, LimitExceeded):
        return limited(rpc_id, err)
    if isinstance(err, Unavailable):
        return unavailable(rpc_id, err.message, err.retry_after)
    if isinstance(err, STORE_FAILED):
        log.warning("store unavailable: %r", err, extra={"request_id": request_id})
        return unavailable(rpc_id, STORE_UNAVAILABLE, 1)
    log.exception("unexpected failure", exc_info=err, extra={"request_id": request_id})
    body = p.error_body(rpc_id, p.INTERNAL_ERROR, "Internal error")
    return Answer(body, 500, outcome="error", rpc_code=p.INTERNAL_ERROR)


def _outcome(status: int) -> str:
    """A 5xx is the service failing to answer (a dependency down, a deadline, a bug): it
    counts against availability ("error"), whichever layer refused; a 4xx is the client's."""
    return "error" if status >= 500 else "protocol_error"


def protocol_error(rpc_id: p.RequestId | None, err: ProtocolError) -> Answer:
    status = 500 if err.code == p.INTERNAL_ERROR else err.http_status
    body = p.error_body(rpc_id, err.code, err.message, err.data)
    return Answer(body, status, outcome=_outcome(status), rpc_code=err.code)


def refused(
    status: int,
    message: str,
    rpc_id: p.RequestId | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    """An HTTP-level refusal: JSON-RPC -32600 with `message`."""
    body = p.error_body(rpc_id, p.INVALID_REQUEST, message)
    return Answer(body, status, headers or {}, _outcome(status), rpc_code=p.INVALID_REQUEST)


def unavailable(rpc_id: p.RequestId | None, message: str, retry_after: int) -> Answer:
    headers: dict[str, str] = {RETRY_AFTER: str(retry_after)}
    return refused(503, f"Service Unavailable: {message}", rpc_id, headers)


def limited(rpc_id: p.RequestId | None, err: LimitExceeded) -> Answer:
    data = {"limit": err.limit, "retryAfterSeconds": err.retry_after_seconds}
    body = p.error_body(rpc_id, p.TOO_MANY_REQUESTS, err.message, data)
    headers: dict[str, str] = {**err.headers, RETRY_AFTER: str(err.retry_after_seconds)}
    return Answer(body, 429, headers, "limited", rpc_code=p.TOO_MANY_REQUESTS)
