"""Load shedding: while this replica is overloaded, new requests are refused at once.

Two signals say "overloaded" (service/server/overload/state.py decides): event-loop lag,
measured by a probe (`probe_ctx`), and the requests in flight on the shed routes at the
in-flight limit (inflight_limit.py), counted by `count_in_flight`. `shed_overload` answers
a shed request a precomputed 503 before the request log, the bearer check, Redis or
PostgreSQL. Only /mcp and the OAuth JSON endpoints are shed (`REFUSALS`). The signals, the
thresholds and what is never shed, and why: docs/decisions/floods.md, "Load shedding".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import hdrs, web
from aiohttp.typedefs import Middleware

from service.app_keys import CONFIG, METRICS, OVERLOAD
from service.edge import headers as h
from service.edge.paths import MCP_PATH, REGISTER_PATH, REVOKE_PATH, TOKEN_PATH
from service.edge.request_ids import new_request_id
from service.edge.waiters import WAIT_CLOCK, WaitClock
from service.observability.metrics.app_metrics import Metrics
from service.server.connections import Connection
from service.server.overload.metrics import watch_overload
from service.server.overload.state import Overload

log = logging.getLogger(__name__)

PROBE_SECONDS = 0.05
RETRY_AFTER_SECONDS = 1

_MCP_REFUSAL = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Service Unavailable: this replica is overloaded; retry shortly"}}'
)
_OAUTH_REFUSAL = (
    b'{"error":"temporarily_unavailable",'
    b'"error_description":"this replica is overloaded; retry shortly"}'
)
# The shed routes and the answer each gets; any other path is never shed.
REFUSALS: dict[str, bytes] = {
    MCP_PATH: _MCP_REFUSAL,
    TOKEN_PATH: _OAUTH_REFUSAL,
    REGISTER_PATH: _OAUTH_REFUSAL,
    REVOKE_PATH: _OAUTH_REFUSAL,
}
_HEADERS: dict[str, str] = {
    hdrs.RETRY_AFTER: str(RETRY_AFTER_SECONDS),
    hdrs.CONTENT_TYPE: "application/json",
}


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def shed_overload(overload: Overload, metrics: Metrics) -> Middleware:
    """Outermost: refuse a request on a shed route while overloaded (503, `Retry-After`,
    precomputed bytes). /livez and /readyz are never shed (and /metrics has its own
    listener), so readiness does not flap with the load; pages for people are not, as a
    bare JSON refusal would help nobody there. A refusal is counted (`shed_requests_total`)
    but gets no access line: in a flood, one JSON line a refusal would cost more than the
    refusal itself. The state is bound here, at setup: each
    `request.app[…]` on the way of every request is three Python calls."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        body = REFUSALS.get(request.path)
        if body is None:
            return await handler(request)
        reason = overload.refusal()
        if reason is None:
            metrics.request_admitted()
            return await handler(request)
        metrics.request_shed(reason)
        headers = {**_HEADERS, h.REQUEST_ID: new_request_id()}
        return web.Response(body=body, status=503, headers=headers)

    return middleware


def count_in_flight(overload: Overload) -> Middleware:
    """Count the admitted requests of the shed routes, once their body is in (so a slow
    upload is not counted, docs/decisions/floods.md), and give each one's latency to the
    in-flight limit: from the moment its last bytes came in (the main listener's
    connections know it; other servers' requests from now), so that the wait for the
    event loop, behind every other connection's work, is part of what the limit sees.

    The limit is by default the fixed cap `ELOVA_SHED_MAX_INFLIGHT` (twice the PostgreSQL
    pool); with `ELOVA_SHED_ADMISSION=adaptive` (opt-in, issue 42) one that adapts to the
    latency of the admitted requests, bounded by that cap.

    A request waiting for an admission slot is a waiter, not in flight, meanwhile
    (slot_waits.py, `waiting`): its waits are bounded by the waiter bounds instead, and
    their time is left out of the latency the limit sees."""
    waiters = overload.waiters

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path not in REFUSALS:
            return await handler(request)
        overload.inflight += 1
        inflight = overload.inflight - waiters.count
        conn = request.protocol
        started = conn.received_at if isinstance(conn, Connection) else time.monotonic()
        clock = WaitClock(waiters)
        token = WAIT_CLOCK.set(clock)
        try:
            return await handler(request)
        finally:
            WAIT_CLOCK.reset(token)
            overload.inflight -= 1
            overload.limit.observe(started + clock.seconds, time.monotonic(), inflight)

    return middleware


async def probe_ctx(app: web.Application) -> AsyncIterator[None]:
    """Measure the loop lag while the app runs."""
    task = asyncio.create_task(_probe(app[OVERLOAD], app), name="elova-shedding-probe")
    try:
        yield
    finally:
        task.cancel()


async def _probe(overload: Overload, app: web.Application) -> None:
    """Sleep `PROBE_SECONDS` and measure how late the loop wakes, forever. Samples are
    clipped at twice the threshold and smoothed, so one long pause (a GC, a big answer)
    does not start shedding but a loop that stays late does (on the second probe late by
    twice the threshold, a few more when just over it). Shedding stops once the smoothed
    lag falls under half the threshold: the gap between the two values (hysteresis) keeps
    it from flapping around one number."""
    loop = asyncio.get_running_loop()
    metrics = app[METRICS]
    while True:
        start = loop.time()
        await asyncio.sleep(PROBE_SECONDS)
        if overload.observe_lag(loop.time() - start - PROBE_SECONDS):
            metrics.set_shedding(overload.lagging)
            extra = {"loop_lag_ms": round(overload.smoothed_lag * 1000, 1)}
            if overload.lagging:
                log.warning("load shedding started: the event loop lags", extra=extra)
            else:
                log.info("load shedding stopped", extra=extra)


def setup_shedding(app: web.Application) -> tuple[Middleware, Middleware]:
    """The overload state and its probe; returns the refusal (outermost in the chain: before
    the request log, auth and the database) and the in-flight count (after the body
    deadline), which app.py places."""
    overload = Overload.from_settings(app[CONFIG].shedding, time.monotonic())
    app[OVERLOAD] = overload
    watch_overload(app[METRICS].overload, overload)
    app.cleanup_ctx.append(probe_ctx)
    return shed_overload(overload, app[METRICS]), count_in_flight(overload)
