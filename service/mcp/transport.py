"""The `/mcp` endpoint: a flat ladder of early returns from HTTP checks to dispatch.

POST: Origin/Host → 403, Accept → 406, Content-Type → 415, size → 413, JSON → 400,
era headers → 400, bearer → 401, session → 400/404, admission → 429, dispatch.
DELETE ends a session (2025 revisions); GET and the rest → 405 (no standalone stream);
OPTIONS answers a CORS preflight from an allowed origin. Responses are `application/json`,
never SSE; notifications get 202 with no body.
"""

from __future__ import annotations

import logging
import time
import uuid

import asyncpg
from aiohttp import web

from service.auth.activity import record_call
from service.auth.bearer import auth_reason, authenticate, challenge
from service.auth.caller import Caller
from service.errors import AuthError, LimitExceeded, ProtocolError, Unavailable
from service.keys import (
    ADMISSION,
    CALLER,
    CATALOG,
    CONFIG,
    DB_POOL,
    METRICS,
    REQUEST_ID,
    SESSIONS,
)
from service.mcp import guards
from service.mcp import protocol as p
from service.mcp.dispatch import KNOWN_METHODS, SESSION_ID_HEADER, dispatch
from service.mcp.envelope import Incoming, check_modern, parse, tool_name
from service.mcp.rpc import Answer, Call
from service.mcp.sessions import Session
from service.mcp.versions import PROTOCOL_VERSION_HEADER, session_header_ok

log = logging.getLogger(__name__)

# The session store (PostgreSQL) failing: answered 503 + Retry-After. InternalClientError is
# what asyncpg raises when the pool resets a connection a restarted server dropped.
_STORE_ERRORS = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)

ORIGIN = "Origin"
HOST = "Host"
ACCEPT = "Accept"
ALLOW = "Allow"
RETRY_AFTER = "Retry-After"
WWW_AUTHENTICATE = "WWW-Authenticate"
REQUEST_ID_HEADER = "X-Request-Id"
ALLOWED_METHODS = "POST, DELETE, OPTIONS"
EXPOSED_HEADERS = (
    "Mcp-Session-Id, WWW-Authenticate, Retry-After, RateLimit, RateLimit-Policy, X-Request-Id"
)


async def handle(request: web.Request) -> web.StreamResponse:
    rid = request.get(REQUEST_ID) or uuid.uuid4().hex
    request[REQUEST_ID] = rid
    cfg = request.app[CONFIG]
    origin = request.headers.get(ORIGIN)
    if not guards.origin_ok(origin, cfg):
        message = f"Forbidden: Origin {origin!r} is not allowed (see ELOVA_ALLOWED_ORIGINS)"
        return _reply(request, Answer(_no_id(-32600, message[:300]), 403))
    if not guards.host_ok(request.headers.get(HOST), cfg):
        message = (
            f"Forbidden: Host {request.headers.get(HOST)!r} is not this service's host"
            " (see ELOVA_PUBLIC_URL)"
        )
        return _reply(request, Answer(_no_id(-32600, message[:300]), 403))
    if request.method == "POST":
        return _reply(request, await post(request, rid))
    if request.method == "DELETE":
        return _reply(request, await delete(request))
    if request.method == "OPTIONS" and origin is not None:
        return _preflight(request)
    refusal = Answer(_no_id(-32600, "Method Not Allowed"), 405, {ALLOW: ALLOWED_METHODS})
    return _reply(request, refusal)


async def post(request: web.Request, rid: str) -> Answer:
    started = time.perf_counter()
    answer, method, tool = await _post(request, rid)
    record_call(request, tool)  # approval activity: an in-process counter, no I/O
    label = method if method in KNOWN_METHODS else "other"
    request.app[METRICS].observe_rpc(
        label, tool, answer.outcome, time.perf_counter() - started, len(answer.body)
    )
    return answer


async def _post(request: web.Request, rid: str) -> tuple[Answer, str, str | None]:
    checked = await _read_request(request)
    if isinstance(checked, Answer):
        return checked, "", None
    incoming = checked
    if incoming.modern:
        try:
            check_modern(incoming, request.headers)
        except ProtocolError as err:
            return _protocol_error(incoming.id, err), incoming.method, None
    in_session = not incoming.modern and incoming.method != "initialize"
    if in_session and SESSION_ID_HEADER not in request.headers:
        message = "Bad Request: Mcp-Session-Id header is required; send initialize first"
        return _refused(400, message, incoming.id), incoming.method, None
    read_approval = not _authorizes_itself(request, incoming)
    caller = await _authenticated(request, incoming.id, read_approval=read_approval)
    if isinstance(caller, Answer):
        return caller, incoming.method, None
    if in_session:
        session = await _open_session(request, caller, incoming.id)
        if isinstance(session, Answer):
            return session, incoming.method, None
    if incoming.id is None:
        return Answer(b"", 202), incoming.method, None
    answer = await _admit_and_dispatch(request, rid, incoming, incoming.id, caller)
    return answer, incoming.method, answer.tool


async def _read_request(request: web.Request) -> Incoming | Answer:
    """HTTP checks, the bounded read and the JSON-RPC envelope."""
    if not guards.accepts_json(request.headers.get(ACCEPT)):
        return _refused(406, "Not Acceptable: the answer is application/json")
    if not guards.is_json_content(request):
        return _refused(415, "Unsupported Media Type: send application/json")
    limit = request.app[CONFIG].limits.max_body_bytes
    body = await guards.read_bounded(request, limit)
    if body is None:
        return _refused(413, f"Payload Too Large: the limit is {limit} bytes")
    try:
        return parse(body, request.headers)
    except ProtocolError as err:
        return _protocol_error(None, err)


async def _admit_and_dispatch(
    request: web.Request, rid: str, incoming: Incoming, request_id: p.RequestId, caller: Caller
) -> Answer:
    admission = request.app.get(ADMISSION)
    metrics = request.app[METRICS]
    grant = None
    if admission is not None:
        try:
            grant = await admission.acquire(rid, caller)
        except LimitExceeded as err:
            # Admission itself counts the refusal (metrics.limit_refused): not again here.
            return _limited(err, request_id)
    metrics.request_started()
    try:
        call = Call(
            request.app, rid, request_id, incoming.method, incoming.params, incoming.modern, caller
        )
        answer = await _answer(call)
    finally:
        metrics.request_finished()
        if admission is not None and grant is not None:
            # The answer leaves once Redis freed the slot: the caller's next request may
            # reach another replica at once. The release is queued before the (bounded)
            # wait, so a client that disconnects (a cancelled handler) cannot leak it.
            await admission.release(grant)
    if grant is not None:
        answer.headers.update(grant.headers())
    return answer


async def _answer(call: Call) -> Answer:
    """The single error boundary of dispatch: every failure becomes a JSON-RPC answer."""
    try:
        return await dispatch(call)
    except ProtocolError as err:
        status = 500 if err.code == p.INTERNAL_ERROR else err.http_status
        body = p.error_body(call.id, err.code, err.message, err.data)
        return Answer(body, status, outcome="error" if status == 500 else "protocol_error")
    except AuthError as err:
        # tools/call: a missing scope (403), or the approval its tool read (401).
        call.app[METRICS].auth_failed(auth_reason(err))
        code = p.FORBIDDEN if err.status == 403 else p.UNAUTHORIZED
        body = p.error_body(call.id, code, err.description)
        cfg = call.app[CONFIG]
        return Answer(body, err.status, {WWW_AUTHENTICATE: challenge(err, cfg)}, "auth_error")
    except Unavailable as err:  # the approval store, read on its own by tools/call
        headers = {RETRY_AFTER: str(err.retry_after_seconds or 1)}
        return _refused(503, f"Service Unavailable: {err.message}", call.id, headers)
    except Exception:
        log.exception(
            "unexpected failure answering %s", call.method, extra={"request_id": call.request_id}
        )
        return Answer(
            p.error_body(call.id, p.INTERNAL_ERROR, "Internal error"), 500, outcome="error"
        )


async def delete(request: web.Request) -> Answer:
    """Ends a 2025-revision session: afterwards it is 404 on every replica."""
    if SESSION_ID_HEADER not in request.headers:
        return _refused(400, "Bad Request: Mcp-Session-Id header is required")
    caller = await _authenticated(request, None)
    if isinstance(caller, Answer):
        return caller
    session = await _open_session(request, caller, None)
    if isinstance(session, Answer):
        return session
    try:
        await request.app[SESSIONS].terminate(request.app[DB_POOL], session)
    except _STORE_ERRORS:
        return _store_unavailable(None)
    return Answer(b"", 204)


async def _open_session(
    request: web.Request, caller: Caller, request_id: p.RequestId | None
) -> Session | Answer:
    """The request's live session, or the answer refusing it (404 unknown, 400 version)."""
    sessions = request.app[SESSIONS]
    session: Session | None = sessions.verify(
        request.headers[SESSION_ID_HEADER], caller.approval_id
    )
    if session is None:
        return _session_not_found(request_id)
    try:
        if await sessions.is_terminated(request.app[DB_POOL], session):
            return _session_not_found(request_id)
    except _STORE_ERRORS:
        return _store_unavailable(request_id)
    header_version = request.headers.get(PROTOCOL_VERSION_HEADER)
    if not session_header_ok(header_version, session.protocol_version):
        message = (
            f"Bad Request: MCP-Protocol-Version {header_version} is not this session's "
            f"version ({session.protocol_version})"
        )
        return _refused(400, message, request_id)
    return session


def _authorizes_itself(request: web.Request, incoming: Incoming) -> bool:
    """A tools/call of a tool whose first statement reads the caller's approval
    (`Tool.authorizes`): the bearer check then verifies the token only."""
    if incoming.method != "tools/call" or incoming.id is None:
        return False
    name = tool_name(incoming.params)
    catalog = request.app[CATALOG]
    tool = catalog.tool(name) if name is not None and name in catalog else None
    return tool is not None and tool.authorizes


async def _authenticated(
    request: web.Request, request_id: p.RequestId | None, *, read_approval: bool = True
) -> Caller | Answer:
    """The caller, or the 401/403 (or 503 when the approval store is down) to answer."""
    try:
        caller = await authenticate(request, read_approval=read_approval)
    except AuthError as err:
        return _auth_refusal(request, err, request_id)
    except Unavailable as err:
        headers = {RETRY_AFTER: str(err.retry_after_seconds or 1)}
        return _refused(503, f"Service Unavailable: {err.message}", request_id, headers)
    request[CALLER] = caller
    return caller


# ---- answers ---------------------------------------------------------------------------


def _no_id(code: int, message: str) -> bytes:
    return p.error_body(None, code, message)


def _refused(
    status: int,
    message: str,
    request_id: p.RequestId | None = None,
    headers: dict[str, str] | None = None,
) -> Answer:
    return Answer(
        p.error_body(request_id, p.INVALID_REQUEST, message),
        status,
        headers or {},
        "protocol_error",
    )


def _protocol_error(request_id: p.RequestId | None, err: ProtocolError) -> Answer:
    body = p.error_body(request_id, err.code, err.message, err.data)
    return Answer(body, err.http_status, outcome="protocol_error")


def _session_not_found(request_id: p.RequestId | None) -> Answer:
    message = "Session not found: it ended or expired; send initialize again"
    return _refused(404, message, request_id)


def _store_unavailable(request_id: p.RequestId | None) -> Answer:
    log.warning("session store unavailable", exc_info=True)
    return _refused(503, "Service Unavailable: retry shortly", request_id, {RETRY_AFTER: "1"})


def _auth_refusal(request: web.Request, err: AuthError, request_id: p.RequestId | None) -> Answer:
    code = p.FORBIDDEN if err.status == 403 else p.UNAUTHORIZED
    headers = {WWW_AUTHENTICATE: challenge(err, request.app[CONFIG])}
    return Answer(
        p.error_body(request_id, code, err.description), err.status, headers, "auth_error"
    )


def _limited(err: LimitExceeded, request_id: p.RequestId) -> Answer:
    data = {"limit": err.limit, "retryAfterSeconds": err.retry_after_seconds}
    body = p.error_body(request_id, p.TOO_MANY_REQUESTS, err.message, data)
    headers = {**err.headers, RETRY_AFTER: str(err.retry_after_seconds)}
    return Answer(body, 429, headers, "limited")


def _cors_headers(request: web.Request) -> dict[str, str]:
    origin = request.headers.get(ORIGIN)
    if origin is None or not guards.origin_ok(origin, request.app[CONFIG]):
        return {}
    return {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Expose-Headers": EXPOSED_HEADERS,
        "Vary": "Origin",
    }


def _preflight(request: web.Request) -> web.Response:
    headers = {
        **_cors_headers(request),
        "Access-Control-Allow-Methods": "POST, DELETE",
        "Access-Control-Allow-Headers": request.headers.get(
            "Access-Control-Request-Headers",
            "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, "
            "Mcp-Method, Mcp-Name",
        ),
        "Access-Control-Max-Age": "600",
        REQUEST_ID_HEADER: request[REQUEST_ID],
    }
    return web.Response(status=204, headers=headers)


def _reply(request: web.Request, answer: Answer) -> web.Response:
    headers: dict[str, str] = {**_cors_headers(request), **answer.headers}
    headers[REQUEST_ID_HEADER] = request[REQUEST_ID]
    if not answer.body:
        return web.Response(status=answer.status, headers=headers)
    return web.Response(
        body=answer.body, status=answer.status, headers=headers, content_type="application/json"
    )
