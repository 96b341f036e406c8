"""The `/mcp` endpoint: the HTTP checks, the envelope and the bearer token, then dispatch.

POST: Origin/Host → 403, Accept → 406, Content-Type → 415, size → 413, JSON → 400,
era headers → 400, session header (2025 revisions) → 400, bearer token → 401, then
service/mcp/dispatch.py (authorization, session, limits, the method).
DELETE ends a session (2025 revisions); GET and the rest → 405 (no standalone stream), but
a browser's GET gets a page saying what this URL is (browser_page.py);
OPTIONS answers a CORS preflight from an allowed origin. Responses are `application/json`,
never SSE; notifications get 202 with no body.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from aiohttp import hdrs, web

from service.app_keys import APPROVAL_READS, CALLER, CONFIG, METRICS, PACING_KEY, REQUEST_ID, TOKENS
from service.auth.activity import record_call
from service.auth.authorization import Authorization
from service.auth.bearer import verify
from service.edge import headers as h
from service.edge.request_ids import new_request_id
from service.errors import AuthError, ProtocolError
from service.mcp import error_boundary, guards
from service.mcp.audit_line import audited
from service.mcp.browser_page import endpoint_page, is_browser_visit
from service.mcp.dispatch import KNOWN_METHODS, dispatch, end_session
from service.mcp.envelope import Incoming, check_modern, parse
from service.mcp.rpc import Answer, Call
from service.observability.tracing import hooks as tracing

if TYPE_CHECKING:
    from service.mcp.span import RequestSpan
    from service.observability.tracing.provider import Tracing

ALLOWED_METHODS = "POST, DELETE, OPTIONS"
EXPOSED_HEADERS = ", ".join(
    (
        h.SESSION_ID,
        hdrs.WWW_AUTHENTICATE,
        hdrs.RETRY_AFTER,
        h.RATE_LIMIT,
        h.RATE_LIMIT_POLICY,
        h.REQUEST_ID,
    )
)
PREFLIGHT_HEADERS = ", ".join(
    (
        hdrs.AUTHORIZATION,
        hdrs.CONTENT_TYPE,
        hdrs.ACCEPT,
        h.SESSION_ID,
        h.PROTOCOL_VERSION,
        h.METHOD,
        h.NAME,
    )
)


async def handle(request: web.Request) -> web.StreamResponse:
    rid = request.get(REQUEST_ID)  # the access log's (service/server/access_log.py)
    if rid is None:  # an app composed without it (a test of one part)
        rid = request[REQUEST_ID] = new_request_id()
    app = request.app  # read once: each `request.app` is two property calls
    cfg = app[CONFIG]
    origin = request.headers.get(hdrs.ORIGIN)
    if not guards.origin_ok(origin, cfg):
        message = f"Forbidden: Origin {origin!r} is not allowed (see ELOVA_ALLOWED_ORIGINS)"
        return _reply(request, error_boundary.refused(403, message[:300]))
    if not guards.host_ok(request.headers.get(hdrs.HOST), cfg):
        message = (
            f"Forbidden: Host {request.headers.get(hdrs.HOST)!r} is not this service's host"
            " (see ELOVA_PUBLIC_URL)"
        )
        return _reply(request, error_boundary.refused(403, message[:300]))
    if request.method == "POST":
        return _reply(request, await post(request, app, rid))
    if request.method == "DELETE":
        return _reply(request, await delete(request, app, rid))
    if request.method == "OPTIONS" and origin is not None:
        return _preflight(request)
    if is_browser_visit(request):
        return endpoint_page(request)
    refusal = error_boundary.refused(
        405, "Method Not Allowed", headers={hdrs.ALLOW: ALLOWED_METHODS}
    )
    return _reply(request, refusal)


async def post(request: web.Request, app: web.Application, rid: str) -> Answer:
    started = time.perf_counter()
    checked = await _read_request(request, app)
    incoming = None if isinstance(checked, Answer) else checked
    traced = tracing.ACTIVE  # None unless OTEL_* configured tracing (observability/tracing/)
    span = None if traced is None else _request_span(traced, request, incoming, started)
    if isinstance(checked, Answer):
        answer, method, tool = checked, "", None
    else:
        try:
            answer = await audited(request, app, checked, await _answer(request, app, rid, checked))
        except BaseException as err:  # cancelled: the client went away
            if span is not None:
                span.abandon(err)
            raise
        method, tool = checked.method, answer.tool
    if span is not None:
        span.finish(answer)
    record_call(request, app, tool)  # approval activity: an in-process counter, no I/O
    label = method if method in KNOWN_METHODS else "other"
    app[METRICS].observe_rpc(
        label,
        tool,
        answer.outcome,
        time.perf_counter() - started,
        len(answer.body),
        rpc_code=answer.rpc_code,
    )
    return answer


def _request_span(
    traced: Tracing, request: web.Request, incoming: Incoming | None, started: float
) -> RequestSpan | None:
    """The MCP server span of this POST, current from now on; None when its trace is not
    sampled. Imported here: the span's module imports OpenTelemetry, which a replica
    without tracing never loads."""
    from service.mcp.span import start

    return start(traced.tracer, request, incoming, started)


async def _answer(
    request: web.Request, app: web.Application, rid: str, incoming: Incoming
) -> Answer:
    if incoming.modern:
        try:
            check_modern(incoming, request.headers)
        except ProtocolError as err:
            return error_boundary.protocol_error(incoming.id, err)
    elif incoming.method != "initialize" and h.SESSION_ID not in request.headers:
        message = "Bad Request: Mcp-Session-Id header is required; send initialize first"
        return error_boundary.refused(400, message, incoming.id)
    call = _call(request, app, rid, incoming)
    if isinstance(call, Answer):
        return call
    answer = await dispatch(call)
    request[PACING_KEY] = call.caller.approval_id  # an approval's refusals are paced together
    if call.authorization.confirmed:
        request[CALLER] = call.caller
    return answer


async def _read_request(request: web.Request, app: web.Application) -> Incoming | Answer:
    """HTTP checks, the bounded read and the JSON-RPC envelope."""
    if not guards.accepts_json(request.headers.get(hdrs.ACCEPT)):
        return error_boundary.refused(406, "Not Acceptable: the answer is application/json")
    if not guards.is_json_content(request):
        return error_boundary.refused(415, "Unsupported Media Type: send application/json")
    limit = app[CONFIG].limits.max_body_bytes
    body = await guards.read_bounded(request, limit)
    if body is None:
        return error_boundary.refused(413, f"Payload Too Large: the limit is {limit} bytes")
    try:
        return parse(body, request.headers)
    except ProtocolError as err:
        return error_boundary.protocol_error(None, err)


def _call(
    request: web.Request, app: web.Application, rid: str, incoming: Incoming
) -> Call | Answer:
    """The request as dispatch answers it, once its bearer token is verified (else 401)."""
    try:
        caller = verify(request, app[TOKENS])
    except AuthError as err:
        credentials = request.headers.get(hdrs.AUTHORIZATION)
        if credentials is not None:  # the same refused token is paced on any connection
            request[PACING_KEY] = hash(credentials)
        return error_boundary.failure(app, rid, incoming.id, err)
    return Call(
        app,
        rid,
        incoming,
        Authorization(caller, app[APPROVAL_READS].read),
        session_id=request.headers.get(h.SESSION_ID),
        header_version=request.headers.get(h.PROTOCOL_VERSION),
        deadline_at=asyncio.get_running_loop().time() + app[CONFIG].limits.request_deadline_seconds,
    )


_DELETE = Incoming(None, "DELETE", False, None, None, None)


async def delete(request: web.Request, app: web.Application, rid: str) -> Answer:
    """Ends a 2025-revision session: afterwards it is 404 on every replica."""
    if h.SESSION_ID not in request.headers:
        return error_boundary.refused(400, "Bad Request: Mcp-Session-Id header is required")
    call = _call(request, app, rid, _DELETE)
    if isinstance(call, Answer):
        return call
    return await end_session(call)


# ---- answers ---------------------------------------------------------------------------


def _cors_headers(request: web.Request) -> dict[str, str]:
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None or not guards.origin_ok(origin, request.app[CONFIG]):
        return {}
    return {
        hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin,
        hdrs.ACCESS_CONTROL_EXPOSE_HEADERS: EXPOSED_HEADERS,
        hdrs.VARY: hdrs.ORIGIN,
    }


def _preflight(request: web.Request) -> web.Response:
    headers = {
        **_cors_headers(request),
        hdrs.ACCESS_CONTROL_ALLOW_METHODS: "POST, DELETE",
        hdrs.ACCESS_CONTROL_ALLOW_HEADERS: request.headers.get(
            hdrs.ACCESS_CONTROL_REQUEST_HEADERS, PREFLIGHT_HEADERS
        ),
        hdrs.ACCESS_CONTROL_MAX_AGE: "600",
        h.REQUEST_ID: request[REQUEST_ID],
    }
    return web.Response(status=204, headers=headers)


def _reply(request: web.Request, answer: Answer) -> web.Response:
    headers: dict[str, str] = {**_cors_headers(request), **answer.headers}
    headers[h.REQUEST_ID] = request[REQUEST_ID]
    if not answer.body:
        return web.Response(status=answer.status, headers=headers)
    return web.Response(
        body=answer.body, status=answer.status, headers=headers, content_type="application/json"
    )
