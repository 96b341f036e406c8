"""Answering one request whose bearer token the transport verified, in one fixed order
(docs/decisions/auth.md, Precedence): authorization (401, 403), the session (2025
revisions), notifications (202), limits (429), then the method. `_answer` keeps that order,
`dispatch` bounds all of it by the request's deadline, and every failure becomes an answer
at one boundary (service/mcp/error_boundary.py); no answer leaves while the caller is still
pending.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from service.app_keys import ADMISSION, CATALOG, DB_POOL, METRICS, SESSIONS
from service.edge import headers as h
from service.errors import (
    InvalidParams,
    InvalidRequest,
    LimitExceeded,
    MethodNotFound,
    SessionNotFound,
    Unavailable,
)
from service.limits.admission import Admission, Grant
from service.limits.shared_limiter import Admitting
from service.mcp import error_boundary
from service.mcp import protocol as p
from service.mcp.rpc import SERVER_INFO, Answer, Call, modern_meta, params_of
from service.mcp.sessions import Session
from service.mcp.tools_call import call_tool
from service.mcp.versions import SUPPORTED, negotiate_session, session_header_ok
from service.mcp.views.resources import BY_URI, EXTENSION, EXTENSION_SETTINGS, VIEWS
from service.tools.base import Tool

# resources: the views' `ui://` documents; the extension: MCP Apps (docs/views.md).
CAPABILITIES: dict[str, Any] = {
    "tools": {},
    "resources": {},
    "extensions": {EXTENSION: EXTENSION_SETTINGS},
}
# Freshness hints: the catalog changes only with a deployment.
LIST_TTL_MS = 5 * 60 * 1000
INSTRUCTIONS = (
    "Read-only access to the retained Elova records of the workspaces this connection was "
    "approved for: workspaces, n8n instances, sync jobs, executions, statistics and workflows. "
    "Call get_many_workspaces first when you do not have a workspace UUID. Tools never change "
    "anything and never reach live n8n; coverage tells how complete the retained view is."
)


def _ok(call: Call, result: Any) -> Answer:
    return Answer(p.result_body(call.id, result))


def _cacheable(call: Call, result: Any, scope: str = "public") -> Answer:
    if call.modern:
        result.result_type = p.COMPLETE
        result.meta = modern_meta()
        result.ttl_ms = LIST_TTL_MS
        result.cache_scope = scope
    return _ok(call, result)


async def discover(call: Call) -> Answer:
    params_of(call, p.RequestParams)
    result = p.DiscoverResult(
        supported_versions=list(SUPPORTED), capabilities=CAPABILITIES, instructions=INSTRUCTIONS
    )
    return _cacheable(call, result)


async def initialize(call: Call) -> Answer:
    params = params_of(call, p.InitializeParams)
    version = negotiate_session(params.protocol_version)
    session_id = call.app[SESSIONS].issue(version, call.caller.approval_id)
    result = p.InitializeResult(version, CAPABILITIES, SERVER_INFO, INSTRUCTIONS)
    answer = _ok(call, result)
    answer.headers[h.SESSION_ID] = session_id
    return answer


async def ping(call: Call) -> Answer:
    return _ok(call, p.EmptyResult())


def _no_cursor(call: Call) -> None:
    params = params_of(call, p.ListParams)
    # Every list fits one page: no cursor was ever issued, so none is valid.
    if isinstance(params.cursor, str):
        raise InvalidParams("Invalid params: unknown cursor (this list has a single page)")


async def tools_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ToolsList(tools=call.app[CATALOG].tools_json))


_LISTED = [view.listed() for view in VIEWS]


async def resources_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ResourcesList(resources=_LISTED))


async def resources_read(call: Call) -> Answer:
    """A view's HTML, authorized like every method (the caller's approval is confirmed
    before it); any other uri is invalid params."""
    uri = params_of(call, p.ReadResourceParams).uri
    view = BY_URI.get(uri)
    if view is None:
        raise InvalidParams(f"Invalid params: unknown resource {uri[:200]!r}", data={"uri": uri})
    return _cacheable(call, p.ResourcesRead(contents=[view.content()]))


async def resource_templates_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ResourceTemplatesList(resource_templates=[]))


async def prompts_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.PromptsList(prompts=[]))


Method = Callable[[Call], Awaitable[Answer]]


def _methods() -> tuple[dict[str, Method], dict[str, Method]]:
    tools: dict[str, Method] = {
        "tools/list": tools_list,
        "tools/call": call_tool,
        "resources/list": resources_list,
        "resources/read": resources_read,
        "resources/templates/list": resource_templates_list,
    }
    # 2026-07-28: what server/discover declares is the contract, so the methods of the
    # capability it does not declare (prompts) are unknown (-32601). The session revisions
    # keep its empty list: some older clients call it regardless.
    modern = {"server/discover": discover, **tools}
    session = {"initialize": initialize, "ping": ping, **tools, "prompts/list": prompts_list}
    return modern, session


MODERN_METHODS, SESSION_METHODS = _methods()
KNOWN_METHODS = frozenset(MODERN_METHODS) | frozenset(SESSION_METHODS)


async def dispatch(call: Call) -> Answer:
    """The answer, by the request's deadline whatever the store does: past it, what still
    waits (an approval read, a pool connection, a release that waits for the cancel of a
    statement on a server that went silent) is abandoned and the answer is 503 Unavailable
    with Retry-After, as for any other store failure (docs/operations.md, Database
    failover)."""
    try:
        async with asyncio.timeout_at(call.deadline_at):
            return await _dispatch(call)
    except TimeoutError:
        late = Unavailable(PAST_DEADLINE, retry_after_seconds=1)
        return error_boundary.failure(call.app, call.request_id, call.id, late)


PAST_DEADLINE = "The request did not finish within its deadline; retry shortly"


async def _dispatch(call: Call) -> Answer:
    try:
        answer = await _answer(call)
    except Exception as err:
        answer = error_boundary.failure(call.app, call.request_id, call.id, err)
    if not call.authorization.decided:
        # The tool did not reach its confirming statement (limits, arguments, a session):
        # the approval is read on its own, and a 401 or 403 replaces the answer.
        try:
            await call.authorization.confirm()
        except Exception as err:
            return error_boundary.failure(call.app, call.request_id, call.id, err)
    return answer


async def _answer(call: Call) -> Answer:
    """The answer, in order:

    1. authorization: the caller is confirmed by reading its approval (401), unless the
       request is a tools/call of a tool whose own first statement confirms it
       (`Tool.authorizes`); a known tool's scope is required (403);
    2. the session (2025 revisions): 404 ended or unknown, 400 another revision;
    3. notifications: 202, nothing more;
    4. limits (429), held while the method answers; the admission's Redis call may run
       while the method does (`Admission.begin`), and then its refusal replaces the
       method's answer;
    5. the method: unknown (-32601), its params (-32602), then what it answers.

    A revoked or expired approval is 401 whatever else is wrong with the request: a caller
    still pending here is confirmed by `_dispatch` before any answer leaves."""
    tool = _requested_tool(call)
    if tool is not None:
        call.authorization.require(tool.name, tool.scope)
    if tool is None or not tool.authorizes:
        await call.authorization.confirm()
    if not call.modern and call.method != "initialize":
        await open_session(call)
    if call.id is None:
        return Answer(b"", 202)
    admission = call.app.get(ADMISSION)
    if admission is None:
        return await _run_method(call)
    # The admission's Redis call overlaps the method when it likely admits (`begin`);
    # otherwise the request waits for its admission first.
    early = admission.begin(call.request_id, call.caller)
    grant = None if early is not None else await admission.acquire(call.request_id, call.caller)
    try:
        answer = await _run_method(call)
        if early is not None:
            admitting, early = early, None  # from here, `settle` undoes it if cancelled
            grant = await _settle(call, admission, admitting)
    finally:
        if early is not None:
            admission.abandon(early)  # cancelled or past the deadline before `settle`
        if grant is not None:
            # The answer leaves once Redis freed the slot: the caller's next request may
            # reach another replica at once. The release is queued before the (bounded)
            # wait, so a client that disconnects (a cancelled handler) cannot leak it.
            await admission.release(grant)
    assert grant is not None  # acquired, or settled: a refusal raised
    answer.headers.update(grant.headers())  # RateLimit-Policy / RateLimit
    return answer


async def _run_method(call: Call) -> Answer:
    metrics = call.app[METRICS]
    metrics.request_started()
    try:
        return await _method(call)(call)
    except Exception as err:
        return error_boundary.failure(call.app, call.request_id, call.id, err)
    finally:
        metrics.request_finished()


async def _settle(call: Call, admission: Admission, admitting: Admitting) -> Grant:
    """The overlapped admission's grant; its refusal (429) replaces the method's answer,
    unless the approval the method read was refused (401 and 403 come before limits)."""
    try:
        return await admission.settle(admitting)
    except LimitExceeded:
        if call.authorization.decided:
            await call.authorization.confirm()  # raises the method's 401 or 403, if any
        raise


def _method(call: Call) -> Method:
    table = MODERN_METHODS if call.modern else SESSION_METHODS
    method = table.get(call.method)
    if method is None:
        # 2026-07-28 answers an unknown method with HTTP 404; sessions keep HTTP 200.
        raise MethodNotFound(
            f"Method not found: {call.method}", http_status=404 if call.modern else 200
        )
    return method


def _requested_tool(call: Call) -> Tool[Any] | None:
    """The catalog tool a tools/call names (None: another method, or no such tool: that
    is answered in the method's turn)."""
    params = call.incoming.params
    if call.method != "tools/call" or not isinstance(params, p.CallToolParams):
        return None
    return call.app[CATALOG].tool(params.name)


async def open_session(call: Call) -> Session:
    """The request's live session (2025 revisions), else SessionNotFound (404: unknown,
    forged, expired or ended) or InvalidRequest (400: another revision's header)."""
    sessions = call.app[SESSIONS]
    session = None
    if call.session_id is not None:
        session = sessions.verify(call.session_id, call.caller.approval_id)
    if session is None or await sessions.is_terminated(call.app[DB_POOL], session):
        raise SessionNotFound("Session not found: it ended or expired; send initialize again")
    if not session_header_ok(call.header_version, session.protocol_version):
        raise InvalidRequest(
            f"Bad Request: MCP-Protocol-Version {call.header_version} is not this session's "
            f"version ({session.protocol_version})"
        )
    return session


async def end_session(call: Call) -> Answer:
    """DELETE: the caller confirmed, then its session ended: afterwards 404 on every replica
    (within the request's deadline, as every request)."""
    try:
        async with asyncio.timeout_at(call.deadline_at):
            await call.authorization.confirm()
            session = await open_session(call)
            await call.app[SESSIONS].terminate(call.app[DB_POOL], session)
    except TimeoutError:
        late = Unavailable(PAST_DEADLINE, retry_after_seconds=1)
        return error_boundary.failure(call.app, call.request_id, None, late)
    except Exception as err:
        return error_boundary.failure(call.app, call.request_id, None, err)
    return Answer(b"", 204)
