"""`tools/call`: look the tool up, check its scope, decode its arguments, run it under the
deadline, and shape the result (structured output or a tool error) within the response bound.

Error precedence (docs/tools.md, Errors): unknown tool (JSON-RPC -32602), missing scope (HTTP 403),
then whatever the arguments and the handler raise. A tool error never carries a traceback,
SQL or a secret: unexpected failures are logged with the request id and answered -32603.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import asyncpg
import msgspec

from service.auth.bearer import confirm
from service.errors import (
    DeadlineExceeded,
    InvalidParams,
    ProtocolError,
    ToolError,
    Unavailable,
)
from service.keys import CATALOG, CLOCK, CONFIG, CURSORS, METRICS
from service.mcp import protocol as p
from service.mcp.rpc import Answer, Call, decode_params, modern_meta
from service.store.db import read_pool
from service.tools.base import Tool, ToolContext, missing_scope

log = logging.getLogger(__name__)

# Failures of the connection to PostgreSQL (not of a query): the read can be retried.
# A restart also shows as the server ending sessions (OperatorInterventionError: admin or
# crash shutdown, cannot connect now) and as asyncpg's InternalClientError when the pool
# resets a connection the server already dropped.
_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.OperatorInterventionError,
    asyncpg.InternalClientError,
    asyncpg.TooManyConnectionsError,
)


class ResponseTooLarge(ProtocolError):
    """A result over the response bound that the tool could not shorten (a bug: logged)."""


async def call_tool(call: Call) -> Answer:
    try:
        return await _call_tool(call)
    except ProtocolError:
        # A malformed call of a tool that reads its own approval: that approval still
        # decides first (401), as it does for every other method.
        await _confirm(call)
        raise


async def _call_tool(call: Call) -> Answer:
    params = decode_params(call, p.CallToolParams)
    catalog = call.app[CATALOG]
    tool = catalog.tool(params.name) if params.name in catalog else None
    if tool is None:
        raise InvalidParams(f"Unknown tool: {params.name}")
    if tool.scope not in call.caller.scopes or not tool.authorizes:
        await _confirm(call, tool)
    raw_arguments = bytes(params.arguments) if isinstance(params.arguments, msgspec.Raw) else b"{}"
    cfg = call.app[CONFIG]
    limit = cfg.limits.max_response_bytes
    ctx = ToolContext(
        pool=read_pool(call.app),
        caller=call.caller,
        cursors=call.app[CURSORS],
        now=call.app[CLOCK](),
        max_response_bytes=limit,
        response_overhead=response_overhead(call),
        tool=tool.name,
        scope=tool.scope,
    )
    try:
        arguments = tool.decode(raw_arguments)
        output = await _run(
            call, tool.name, tool.handler, ctx, arguments, cfg.limits.request_deadline_seconds
        )
    except ToolError as err:
        # Raised before the handler confirmed its caller (arguments, zone, cursor, a store
        # failure): the approval is read on its own first, and a 401 or 403 wins.
        call.caller = ctx.caller
        await _confirm(call, tool)
        return Answer(_tool_error(call, err), outcome=f"tool_error:{err.code}", tool=tool.name)
    call.caller = ctx.caller
    if not call.caller.confirmed:  # a handler that did not confirm: nothing leaves unchecked
        log.error("tool %s answered without confirming its caller", tool.name)
        await _confirm(call, tool)
    structured = ctx.encode(output)
    body = p.result_body(call.id, _success(call, structured))
    if len(body) > limit:
        log.error(
            "tool %s produced %d bytes, over the %d-byte response bound",
            tool.name,
            len(body),
            limit,
            extra={"request_id": call.request_id},
        )
        raise ResponseTooLarge("Internal error")
    return Answer(body, tool=tool.name)


async def _confirm(call: Call, tool: Tool[Any] | None = None) -> None:
    """Read the approval of a pending caller now (AuthError, or Unavailable when the store
    is down; a confirmed caller is left as it is), then require `tool`'s scope (403)."""
    call.caller = await confirm(call.app, call.caller)
    if tool is not None and tool.scope not in call.caller.scopes:
        raise missing_scope(tool.name, tool.scope)


async def _run(
    call: Call, tool_name: str, handler: Any, ctx: ToolContext, arguments: Any, deadline: float
) -> Any:
    # A handler is its record-store reads plus shaping: its time is reported as the tool's
    # PostgreSQL call time (the dashboard's dependency panel), failed when the store failed.
    started = time.perf_counter()
    failed = True
    try:
        async with asyncio.timeout(deadline):
            output = await handler(ctx, arguments)
        failed = False
        return output
    except ToolError:
        failed = False  # an answer about the request (NOT_FOUND, …), not a store failure
        raise
    except (TimeoutError, asyncpg.QueryCanceledError) as err:
        raise DeadlineExceeded(
            f"The request did not finish within {deadline:g} seconds.",
            hint="Retry, or narrow the request (a smaller limit or period).",
        ) from err
    except _CONNECTION_ERRORS as err:
        log.warning(
            "tool %s: database unavailable: %r",
            tool_name,
            err,
            extra={"request_id": call.request_id},
        )
        raise Unavailable(
            "The record store is unavailable right now.",
            hint="Retry the same read shortly.",
            retry_after_seconds=1,
        ) from err
    finally:
        call.app[METRICS].db_call(tool_name, time.perf_counter() - started, failed)


def _success(call: Call, structured: bytes) -> p.CallToolResult:
    result = p.CallToolResult(
        content=[p.TextContent(text=structured.decode("utf-8"))],
        structured_content=msgspec.Raw(structured),
        is_error=False,
    )
    if call.modern:
        result.result_type = p.COMPLETE
        result.meta = modern_meta()
    return result


def _tool_error(call: Call, err: ToolError) -> bytes:
    meta = err.meta()
    result = p.CallToolResult(
        content=[p.TextContent(text=err.text)],
        is_error=True,
        meta=modern_meta(meta) if call.modern else meta,
    )
    if call.modern:
        result.result_type = p.COMPLETE
    return p.result_body(call.id, result)


def response_overhead(call: Call) -> int:
    """Bytes of the success response around structuredContent and the text block's JSON
    string: `ToolContext.fits` adds both to this and compares with the response bound."""
    base = _OVERHEAD.get(call.modern)
    if base is None:
        probe = _success(call, b"0")
        probe.content = [p.TextContent(text="")]
        # b"0" stands for the structured JSON (1 byte) and "" for the text string (2 bytes),
        # id 0 for the request id (1 byte); the envelope is otherwise the same every call.
        base = _OVERHEAD[call.modern] = len(p.result_body(0, probe)) - 4
    return base + len(p.encode(call.id))


_OVERHEAD: dict[bool, int] = {}
