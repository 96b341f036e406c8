"""Reading a request's body within the body deadline: the `bounded_reading` middleware.

A body must arrive within `body_timeout_seconds` of its head, or the request gets a 408 and
the connection is closed. A declared body that fits the read buffer is awaited before the
rest of the middlewares run, so a slow upload is never counted as a request in flight for
load shedding; nothing reaches the bearer check, a limiter slot or PostgreSQL before its
head and such a body are in (docs/decisions/floods.md). The middleware also ends the head
deadline of the main listener's connection (service/server/connections.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import StreamReader, hdrs, web

from service.app_keys import CONFIG, METRICS
from service.server.connections import Connection

# A declared body up to this size is awaited whole before the handler runs: it fits in
# aiohttp's read buffer (64 KiB, paused past twice that), so waiting never stalls the read.
AWAITED_BODY_BYTES = 64 * 1024

_BODY_TIMEOUT = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Request Timeout: the body did not arrive in time"}}'
)


class BodyTimeout(TimeoutError):
    """The request body did not arrive within the body deadline. A TimeoutError, so aiohttp's
    lingering read of an unread body ends quietly when it meets it."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def bounded_reading(request: web.Request, handler: Handler) -> web.StreamResponse:
    """End the head deadline; bound the body's arrival to the body deadline."""
    conn = request.protocol
    if isinstance(conn, Connection):
        conn.request_started()
    content = request.content
    if not request.body_exists or content.is_eof():
        return await handler(request)
    seconds = request.app[CONFIG].connections.body_timeout_seconds
    declared = request.content_length
    # At the deadline the stream ends with BodyTimeout (a timer, cheaper than a timeout scope).
    timer = asyncio.get_running_loop().call_later(seconds, _end_slow_body, content)
    if declared is not None and declared <= AWAITED_BODY_BYTES:
        try:
            await content.wait_eof()
        except BodyTimeout:
            return _body_too_slow(request)
        finally:
            timer.cancel()
        return await handler(request)
    # Chunked or large: the handler reads.
    try:
        return await handler(request)
    except BodyTimeout:
        return _body_too_slow(request)
    finally:
        timer.cancel()


def _end_slow_body(content: StreamReader) -> None:
    if not content.is_eof():
        content.set_exception(BodyTimeout())


def _body_too_slow(request: web.Request) -> web.Response:
    request.content.set_exception(BodyTimeout())  # aiohttp reads no more of it
    request.app[METRICS].connection_cut("body_timeout")
    response = web.Response(
        body=_BODY_TIMEOUT, status=408, headers={hdrs.CONTENT_TYPE: "application/json"}
    )
    response.force_close()
    return response
