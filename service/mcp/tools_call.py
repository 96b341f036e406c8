"""`tools/call`: look the tool up, decode its arguments, run it under the deadline, and
shape the result (structured output or a tool error) within the response bound.

Dispatch has already required the tool's scope and held the limits (service/mcp/dispatch.py);
whatever the arguments and the handler raise comes after those. A tool error never carries
a traceback, SQL or a secret: unexpected failures are logged with the request id and
answered -32603 by the boundary (service/mcp/error_boundary.py).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from typing import Any

import msgspec

from service.app_keys import CATALOG, CLOCK, CONFIG, CURSORS, METRICS
from service.errors import InvalidParams, ResponseTooLarge, ToolError
from service.mcp import protocol as p
from service.mcp.rpc import Answer, Call, modern_meta, params_of
from service.store.db import read_pool
from service.store.failures import tool_failure
from service.tools.base import ToolContext

log = logging.getLogger(__name__)

ANSWER_RESERVE_SECONDS = 0.5


def time_now() -> float:
    return asyncio.get_running_loop().time()


async def call_tool(call: Call) -> Answer:
    params = params_of(call, p.CallToolParams)
    tool = call.app[CATALOG].tool(params.name)
    if tool is None:
        raise InvalidParams(f"Unknown tool: {params.name}")
    raw_arguments = bytes(params.arguments) if isinstance(params.arguments, msgspec.Raw) else b"{}"
    cfg = call.app[CONFIG]
    limit = cfg.limits.max_response_bytes
    ctx = ToolContext(
        pool=read_pool(call.app),
        authorization=call.authorization,
        cursors=call.app[CURSORS],
        now=call.app[CLOCK](),
        max_response_bytes=limit,
        response_overhead=response_overhead(call),
    )
    try:
        arguments = tool.decode(raw_arguments)
        output = await _run(call, tool.name, tool.handler, ctx, arguments)
    except ToolError as err:
        # Raised before the handler confirmed its caller (arguments, zone, cursor, a store
        # failure): dispatch reads the approval before this leaves, and a 401 or 403 wins.
        return Answer(_tool_error(call, err), outcome=f"tool_error:{err.code}", tool=tool.name)
    if not call.authorization.confirmed:  # a bug of the handler: dispatch confirms for it
        log.error("tool %s answered without confirming its caller", tool.name)
    structured = ctx.encode(output)
    body = p.success_body(call.id, structured, modern_meta() if call.modern else None)
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


async def _run(call: Call, tool_name: str, handler: Any, ctx: ToolContext, arguments: Any) -> Any:
    # A handler is its record-store reads plus shaping: its time is reported as the tool's
    # PostgreSQL call time (the dashboard's dependency panel), failed when the store failed.
    deadline = call.app[CONFIG].limits.request_deadline_seconds
    started = time.perf_counter()
    failed = True
    try:
        # Within the request's deadline, less what releasing the connection and answering
        # need: the tool answers DEADLINE_EXCEEDED itself before dispatch's bound strikes.
        reserve = min(ANSWER_RESERVE_SECONDS, deadline / 10)
        ends = call.deadline_at - reserve  # a Call made without a deadline: from now
        async with asyncio.timeout_at(ends if ends != math.inf else time_now() + deadline):
            output = await handler(ctx, arguments)
        failed = False
        return output
    except ToolError:
        failed = False  # an answer about the request (NOT_FOUND, …), not a store failure
        raise
    except Exception as err:
        translated = tool_failure(err, deadline)
        if translated is None:
            raise
        if translated.code == "UNAVAILABLE":
            log.warning(
                "tool %s: database unavailable: %r",
                tool_name,
                err,
                extra={"request_id": call.request_id},
            )
        raise translated from err
    finally:
        call.app[METRICS].db_call(tool_name, time.perf_counter() - started, failed)


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
        # b"0" stands for the structured JSON (1 byte) and for the text string ('"0"', 3
        # bytes), id 0 for the request id (1 byte); the envelope is otherwise the same.
        probe = p.success_body(0, b"0", modern_meta() if call.modern else None)
        base = _OVERHEAD[call.modern] = len(probe) - 5
    return base + len(p.encode(call.id))


_OVERHEAD: dict[bool, int] = {}
