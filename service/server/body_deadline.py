"""Reading a request's body within the body deadline: the `bounded_reading` middleware.

A body must arrive within `body_timeout_seconds` of its head, or the request gets a 408 and
the connection is closed; every body the request bound admits is in before the rest of the
middlewares run, so nothing that sends a body slowly holds an in-flight count, the bearer
check, a limiter slot or PostgreSQL. A client gone before its body is in is recorded as 499,
not a failure. Why: docs/decisions/floods.md, "Slow and idle clients" (body deadline,
nothing unauthenticated holds capacity, a client gone mid-body).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from aiohttp import ClientPayloadError, StreamReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from service.app_keys import CONFIG, METRICS
from service.edge.paths import MCP_PATH
from service.server.connections import Connection
from service.server.error_pages import http_error_answer

log = logging.getLogger(__name__)

# A declared body up to this size is awaited whole before the handler runs: it fits in
# aiohttp's read buffer (64 KiB, paused past twice that), so waiting never stalls the read.
AWAITED_BODY_BYTES = 64 * 1024
CLIENT_GONE_STATUS = 499  # nginx's "client closed request": nobody reads the answer

_BODY_TIMEOUT = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Request Timeout: the body did not arrive in time"}}'
)
_BODY_MALFORMED = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Bad Request: the body could not be read"}}'
)
_CLIENT_GONE = b'{"error":"client_closed_request"}'

# What a body read raises when the client closed the connection before its body was in:
# the connection's loss (ConnectionResetError), or the parser's end of an incomplete body.
CLIENT_GONE = (ConnectionResetError, ClientPayloadError, HttpProcessingError)


class BodyTimeout(TimeoutError):
    """The request body did not arrive within the body deadline. A TimeoutError, so aiohttp's
    lingering read of an unread body ends quietly when it meets it."""


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def bounded_reading(request: web.Request, handler: Handler) -> web.StreamResponse:
    """End the head deadline; have the body in, within the body deadline, before the rest.

    The head deadline is the main listener's connection's (service/server/connections.py). A
    declared body that fits the read buffer is awaited where it lies (the handler takes it
    in one call); a chunked or larger one is read here (`request.read()`, bounded by the
    request bound: past it, 413) and the handler gets it from `request.read()`'s copy. A
    body declared over the bound is left to the handler, which refuses it by its
    Content-Length without reading it. A client that closes its connection before its body
    is in is counted (`abandoned_requests_total`), logged at DEBUG and recorded as 499
    (client closed request), never a 500 with a traceback."""
    conn = request.protocol if isinstance(request.protocol, Connection) else None
    if conn is not None:
        conn.request_started()
    content = request.content
    declared = request.content_length
    if (
        not request.body_exists
        or content.is_eof()
        or (declared is not None and declared > request.app[CONFIG].limits.max_body_bytes)
    ):  # no body to wait for; one declared over the bound is refused by its Content-Length
        if conn is not None:
            conn.request_received()
        return await handler(request)
    seconds = request.app[CONFIG].connections.body_timeout_seconds
    # At the deadline the stream ends with BodyTimeout (a timer, cheaper than a timeout scope).
    timer = asyncio.get_running_loop().call_later(seconds, _end_slow_body, content)
    try:
        if declared is not None and declared <= AWAITED_BODY_BYTES:
            await content.wait_eof()
        else:
            await request.read()  # chunked or large: read here, kept for the handler
    except BodyTimeout:
        return _body_too_slow(request)
    except web.HTTPRequestEntityTooLarge as exc:
        return _body_too_large(request, exc)
    except CLIENT_GONE as err:
        if _connection_open(request):
            return _body_malformed(request)
        return _client_gone(request, err)
    finally:
        timer.cancel()
    if conn is not None:
        conn.request_received()
    return await handler(request)


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


def _body_too_large(request: web.Request, exc: web.HTTPRequestEntityTooLarge) -> web.StreamResponse:
    """The 413 of a chunked body past the request bound, in its route's shape (what the
    handler answers for a Content-Length over it). The rest of the body is not read: the
    connection closes after the answer."""
    limit = request.app[CONFIG].limits.max_body_bytes
    response: web.StreamResponse | None
    if request.path == MCP_PATH:
        body = (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
            b'"message":"Payload Too Large: the limit is %d bytes"}}' % limit
        )
        response = web.Response(
            body=body, status=413, headers={hdrs.CONTENT_TYPE: "application/json"}
        )
    else:
        response = http_error_answer(request, exc)
        if response is None:
            response = web.Response(status=413, text=exc.text)
    response.force_close()
    return response


def _connection_open(request: web.Request) -> bool:
    transport = request.transport
    return transport is not None and not transport.is_closing()


def _body_malformed(request: web.Request) -> web.Response:
    """A body the parser refused while its client is still there (a broken chunk): 400."""
    response = web.Response(
        body=_BODY_MALFORMED, status=400, headers={hdrs.CONTENT_TYPE: "application/json"}
    )
    response.force_close()
    return response


def _client_gone(request: web.Request, err: BaseException) -> web.Response:
    """The client closed its connection before its body was in: nobody will read an answer,
    and it is no error of this service."""
    request.app[METRICS].request_abandoned()
    log.debug(
        "the client closed the connection before its body was in",
        extra={"event": "client_gone", "path": request.path, "error_type": type(err).__name__},
    )
    response = web.Response(
        body=_CLIENT_GONE,
        status=CLIENT_GONE_STATUS,
        headers={hdrs.CONTENT_TYPE: "application/json"},
    )
    response.force_close()
    return response
