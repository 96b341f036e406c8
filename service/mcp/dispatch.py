"""MCP methods of both eras: one function a method, each returning an `Answer`.

The transport has already authenticated the caller, checked the headers and the session;
dispatch only answers. Protocol failures are raised as `ProtocolError`s and turned into
JSON-RPC errors by the transport's single error boundary.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from service.errors import InvalidParams, MethodNotFound
from service.keys import CATALOG, SESSIONS
from service.mcp import protocol as p
from service.mcp.calls import call_tool
from service.mcp.rpc import SERVER_INFO, Answer, Call, decode_params, modern_meta
from service.mcp.versions import SUPPORTED, negotiate_session

CAPABILITIES: dict[str, Any] = {"tools": {}}
# Freshness hints: the catalog changes only with a deployment.
LIST_TTL_MS = 5 * 60 * 1000
INSTRUCTIONS = (
    "Read-only access to the retained Elova records of the workspaces this connection was "
    "approved for: workspaces, n8n instances, sync jobs, executions, statistics and workflows. "
    "Call get_many_workspaces first when you do not have a workspace UUID. Tools never change "
    "anything and never reach live n8n; coverage tells how complete the retained view is."
)
SESSION_ID_HEADER = "Mcp-Session-Id"


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
    decode_params(call, p.RequestParams)
    result = p.DiscoverResult(
        supported_versions=list(SUPPORTED), capabilities=CAPABILITIES, instructions=INSTRUCTIONS
    )
    return _cacheable(call, result)


async def initialize(call: Call) -> Answer:
    params = decode_params(call, p.InitializeParams)
    version = negotiate_session(params.protocol_version)
    session_id = call.app[SESSIONS].issue(version, call.caller.approval_id)
    result = p.InitializeResult(version, CAPABILITIES, SERVER_INFO, INSTRUCTIONS)
    answer = _ok(call, result)
    answer.headers[SESSION_ID_HEADER] = session_id
    return answer


async def ping(call: Call) -> Answer:
    return _ok(call, p.EmptyResult())


def _no_cursor(call: Call) -> None:
    params = decode_params(call, p.ListParams)
    # Every list fits one page: no cursor was ever issued, so none is valid.
    if isinstance(params.cursor, str):
        raise InvalidParams("Invalid params: unknown cursor (this list has a single page)")


async def tools_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ToolsList(tools=call.app[CATALOG].tools_json))


async def resources_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ResourcesList(resources=[]))


async def resource_templates_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.ResourceTemplatesList(resource_templates=[]))


async def prompts_list(call: Call) -> Answer:
    _no_cursor(call)
    return _cacheable(call, p.PromptsList(prompts=[]))


Method = Callable[[Call], Awaitable[Answer]]


def _methods() -> tuple[dict[str, Method], dict[str, Method]]:
    tools: dict[str, Method] = {"tools/list": tools_list, "tools/call": call_tool}
    # 2026-07-28: what server/discover declares is the contract, so the methods of the
    # capabilities it does not declare (resources, prompts) are unknown (-32601). The
    # session revisions keep their empty lists: some older clients call them regardless.
    modern = {"server/discover": discover, **tools}
    session = {
        "initialize": initialize,
        "ping": ping,
        **tools,
        "resources/list": resources_list,
        "resources/templates/list": resource_templates_list,
        "prompts/list": prompts_list,
    }
    return modern, session


MODERN_METHODS, SESSION_METHODS = _methods()
KNOWN_METHODS = frozenset(MODERN_METHODS) | frozenset(SESSION_METHODS)


async def dispatch(call: Call) -> Answer:
    table = MODERN_METHODS if call.modern else SESSION_METHODS
    method = table.get(call.method)
    if method is None:
        # 2026-07-28 answers an unknown method with HTTP 404; sessions keep HTTP 200.
        raise MethodNotFound(
            f"Method not found: {call.method}", http_status=404 if call.modern else 200
        )
    return await method(call)
