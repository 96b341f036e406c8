"""One access line a request, the request id, and the HTTP metrics: the request-log middleware.

Each HTTP request gets a request id (kept from a well-formed incoming `X-Request-Id`, else
generated), returned in the `X-Request-Id` response header, stored as `request[REQUEST_ID]`
and bound as the request's (service/observability/logs.py) for every line logged while the
request runs. `_log_access` writes the line; `RefusalSampler` keeps a flood's refusals to a
few lines a second (docs/decisions/floods.md, "Refusals that cost almost nothing"), while
the HTTP metrics still count every request.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Middleware

from service.app_keys import CALLER, METRICS, REQUEST_ID
from service.edge import headers as h
from service.edge.client_address import client_address
from service.edge.paths import LIVEZ_PATH, READYZ_PATH
from service.edge.request_ids import new_request_id
from service.observability.logs import (
    CURRENT_REQUEST_ID,
    LOG_FIELDS,
    log_redacted,
    redact,
    redact_field_text,
)

if TYPE_CHECKING:
    from service.observability.metrics.app_metrics import Metrics

ACCESS = logging.getLogger("elova.access")
log = logging.getLogger(__name__)

# Ids from a load balancer or client are kept for correlation only when they look like ids:
# anything longer or with other characters could smuggle a credential into the logs.
_INCOMING_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")
_PROBES = frozenset({LIVEZ_PATH, READYZ_PATH})
REFUSED_STATUSES = frozenset({401, 403, 429})
REFUSAL_LINES_PER_SECOND = 20
# Methods aiohttp parses as any token: these are logged as they are, others redacted.
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _request_id_for(request: web.Request) -> str:
    incoming = request.headers.get(h.REQUEST_ID, "")
    return incoming if _INCOMING_ID.match(incoming) else new_request_id()


def _route_of(request: web.Request) -> str | None:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else None


def _response_bytes(response: web.StreamResponse | None) -> int | None:
    if response is None:
        return None
    if isinstance(response, web.Response) and isinstance(response.body, bytes):
        return len(response.body)
    return response.body_length or response.content_length


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def request_log_middleware(metrics: Metrics, sampler: RefusalSampler) -> Middleware:
    """Outermost middleware: request id, HTTP metrics and the one access line a request.
    What it records into is bound here, at setup, not looked up in the app per request."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = _request_id_for(request)
        request[REQUEST_ID] = request_id
        context = CURRENT_REQUEST_ID.set(request_id)
        start = time.perf_counter()
        status, response = 500, None
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            exc.headers[h.REQUEST_ID] = request_id
            raise
        except asyncio.CancelledError:
            status = 499  # the client went away; nobody reads an answer
            raise
        except Exception:
            # Last resort for bugs outside the MCP error boundary: log the stack, answer a
            # bare 500 that names only the request id (never the exception text).
            log.exception("unhandled error")
            response = web.json_response(
                {"error": "internal_error", "requestId": request_id}, status=500
            )
            return response
        finally:
            seconds = time.perf_counter() - start
            route = _route_of(request)
            metrics.observe_http(route, request.method, status, seconds)
            _log_access(request, route, status, seconds, response, sampler)
            CURRENT_REQUEST_ID.reset(context)

    return middleware


def _log_access(
    request: web.Request,
    route: str | None,
    status: int,
    seconds: float,
    response: web.StreamResponse | None,
    sampler: RefusalSampler,
) -> None:
    """The access line of one request: at ERROR for a 5xx, DEBUG for a probe that
    succeeded, INFO otherwise (refusals past the sampler's share at DEBUG too).

    Query strings are never logged. The line's `client` is the client's address
    (service/edge/client_address.py: behind a trusted proxy, read from its forwarding
    header). The line is built, not scanned: the text a client or a dependency controls (the
    method, the path, the user agent, the OAuth client's id, annotations) is redacted field
    by field, and what the service formats itself (route, status, numbers, the parsed
    address, ids it minted) goes in as it is (`log_redacted`, service/observability/logs.py).
    """
    if status >= 500:
        level = logging.ERROR
    elif request.path in _PROBES and status < 400:
        level = logging.DEBUG  # probes every few seconds would drown the real traffic
    else:
        level = logging.INFO
    if (
        level == logging.INFO
        and status in REFUSED_STATUSES
        and ACCESS.isEnabledFor(level)
        and not sampler.admit(status)
    ):
        level = logging.DEBUG
    if not ACCESS.isEnabledFor(level):
        return
    method = request.method
    if method not in _KNOWN_METHODS:
        method = redact_field_text(method)
    path = redact_field_text(request.path)  # never the query string: it can carry codes
    user_agent = request.headers.get("User-Agent", "")[:200]
    fields: dict[str, Any] = {
        "event": "http_request",
        "method": method,
        "path": path,
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "response_bytes": _response_bytes(response),
        "client": client_address(request),
        "user_agent": redact_field_text(user_agent) if user_agent else None,
    }
    caller = request.get(CALLER)
    if caller is not None:
        fields["account_id"] = str(caller.account_id)
        fields["approval_id"] = str(caller.approval_id)
        fields["client_id"] = redact_field_text(caller.client_id)
    annotations = request.get(LOG_FIELDS)
    if annotations:
        fields.update({key: redact(key, value) for key, value in annotations.items()})
    log_redacted(ACCESS, level, f"{method} {path} {status}", fields)


class RefusalSampler:
    """Which refusals get an INFO access line: the first `per_second` of each second. The
    others are counted by status and summed up in one INFO line when their second ends (or
    when the next one starts, or at shutdown), logged outside any request."""

    def __init__(
        self,
        per_second: int = REFUSAL_LINES_PER_SECOND,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_second = per_second
        self._clock = clock
        self._second_started = -1.0
        self._admitted = 0
        self._suppressed: Counter[int] = Counter()
        self._summary: asyncio.TimerHandle | None = None

    def admit(self, status: int) -> bool:
        """True when this refusal gets its INFO line; False when it is only counted."""
        now = self._clock()
        if self._second_started < 0 or now - self._second_started >= 1.0:
            self.flush()
            self._second_started, self._admitted = now, 0
        if self._admitted < self._per_second:
            self._admitted += 1
            return True
        self._suppressed[status] += 1
        if self._summary is None:
            self._schedule_summary(self._second_started + 1.0 - now)
        return False

    def flush(self) -> None:
        """Log the summary of the refusals suppressed so far, if any."""
        if self._summary is not None:
            self._summary.cancel()
            self._summary = None
        if not self._suppressed:
            return
        by_status, self._suppressed = self._suppressed, Counter()
        # An empty context: the line belongs to no request (no request id).
        contextvars.Context().run(_log_suppressed, by_status)

    def _schedule_summary(self, delay: float) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # outside a loop: the next second or the shutdown logs the summary
        self._summary = loop.call_later(max(delay, 0.0), self.flush)


def _log_suppressed(by_status: Counter[int]) -> None:
    total = sum(by_status.values())
    ACCESS.info(
        "%d similar refusals suppressed",
        total,
        extra={
            "event": "http_refusals_suppressed",
            "suppressed": total,
            "by_status": {str(status): n for status, n in sorted(by_status.items())},
        },
    )


REFUSAL_SAMPLER: web.AppKey[RefusalSampler] = web.AppKey("refusal_sampler", RefusalSampler)


async def _stamp_request_id(request: web.Request, response: web.StreamResponse) -> None:
    # on_response_prepare also covers streamed responses, whose headers leave before the
    # middleware sees them. The transport's answers carry the request's id already (it is
    # the only code that sets this header, always to the request's id).
    headers = response.headers
    if h.REQUEST_ID in headers:
        return
    request_id = request.get(REQUEST_ID)
    if request_id is not None:
        headers[h.REQUEST_ID] = request_id


async def _flush_refusals(app: web.Application) -> None:
    app[REFUSAL_SAMPLER].flush()


def setup_access_log(app: web.Application) -> Middleware:
    """The sampler of refusals' access lines and the header hook; returns the
    request-id/access-log middleware, which app.py places in the chain."""
    sampler = app[REFUSAL_SAMPLER] = RefusalSampler()
    app.on_response_prepare.append(_stamp_request_id)
    app.on_cleanup.append(_flush_refusals)
    return request_log_middleware(app[METRICS], sampler)
