"""Structured JSON logs: the formatter, redaction, and one access line a request.

Every line is one JSON object on stdout. Each HTTP request gets a request id (kept from a
well-formed incoming `X-Request-Id`, else generated), returned in the `X-Request-Id` response
header, stored as `request[REQUEST_ID]` and attached to every line logged while the request
runs. Nothing secret reaches a line: query strings are never logged, fields named like
credentials are replaced, and bearer tokens, JWTs, URL passwords, PEM keys, credential
query parameters and cookies (Cookie / Set-Cookie values, our cookies by name) are masked
in every message, field and stack trace. `Redaction`, a filter on the handler and on the
loggers of aiohttp and asyncio, masks the same in every record before any handler (ours,
or another's) formats it; a malformed request head, which aiohttp logs as an error with a
traceback quoting the header line, becomes one info line (a client's mistake, not ours).

Refusals (401, 403, 429) are what a flood is made of, so their access lines are sampled: at
most `REFUSAL_LINES_PER_SECOND` a second at INFO per app (one app a process); the rest go
to DEBUG, and one INFO line a second says how many ("N similar refusals suppressed"). The
HTTP metrics still count every request.

The access line's `client` is the client's address (`service.client_address`: behind a
trusted proxy, read from its forwarding header).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Middleware

from service import headers as h
from service.client_address import client_address
from service.keys import CALLER, METRICS, REQUEST_ID
from service.request_ids import new_request_id
from service.trace_ids import current_trace_ids

if TYPE_CHECKING:
    from service.metrics import Metrics

ACCESS = logging.getLogger("elova.access")
log = logging.getLogger(__name__)

# Ids from a load balancer or client are kept for correlation only when they look like ids:
# anything longer or with other characters could smuggle a credential into the logs.
_INCOMING_ID = re.compile(r"^[A-Za-z0-9-]{8,64}$")
_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "elova_request_id", default=None
)
_PROBES = frozenset({"/livez", "/readyz"})
REFUSED_STATUSES = frozenset({401, 403, 429})
REFUSAL_LINES_PER_SECOND = 20
_MAX_FIELD_CHARS = 2000
REDACTED = "[redacted]"

_SECRET_KEY = re.compile(
    r"(?i)(authorization|token|secret|password|passwd|cookie|verifier|signing_key|"
    r"private_key|api_key|apikey|credential|dsn|database_url)"
)
_SECRET_TEXT = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
     "[redacted-key]"),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]+"), r"\1 " + REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"), "[redacted-jwt]"),
    (re.compile(
        r"(?i)([?&;](?:access_token|refresh_token|id_token|token|code|code_verifier|"
        r"client_secret|password|state|assertion)=)[^&\s\"'#]*"),
     r"\1" + REDACTED),
    (re.compile(r"(?i)\b((?:refresh|access)_token[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
     r"\1" + REDACTED),
    (re.compile(r"(://[^:/@\s]+:)[^@/\s]+@"), r"\1" + REDACTED + "@"),
    # a Cookie or Set-Cookie header's value, as a header line, a repr or a mapping item
    (re.compile(r"(?i)\b((?:set-)?cookie\s*[\"']?\s*[:=]\s*[\"']?)[^\r\n\"']+"),
     r"\1" + REDACTED),
    # our cookies by name (session, sign-in CSRF), wherever their value shows
    (re.compile(r"\b((?:__Host-)?elova_[A-Za-z0-9_]*=)[^;,\s\"']+"), r"\1" + REDACTED),
)  # fmt: skip

# Attributes every LogRecord has: anything else on a record came from `extra=` and is a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def redact_text(text: str) -> str:
    """Mask every credential-looking part of a string."""
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


def redact(key: str, value: Any) -> Any:
    """A field value fit for a log line: secrets by name masked, strings scrubbed, bounded."""
    if _SECRET_KEY.search(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): redact(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact(key, v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    text = redact_text(str(value))
    return text if len(text) <= _MAX_FIELD_CHARS else text[:_MAX_FIELD_CHARS] + "…"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request id, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact_text(record.getMessage()),
        }
        request_id = _REQUEST_ID.get()
        if request_id is not None:
            line["request_id"] = request_id
        traced = current_trace_ids()  # a traced request's lines carry its trace
        if traced is not None:
            line["trace_id"], line["span_id"] = traced
        for key, value in record.__dict__.items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                line[key] = redact(key, value)
        if record.exc_info and record.exc_info[0] is not None:
            exc_type, exc, tb = record.exc_info
            line["error"] = {
                "type": exc_type.__name__,
                "stack": redact_text("".join(traceback.format_exception(exc_type, exc, tb))),
            }
        text = json.dumps(line, ensure_ascii=False, default=str)
        # Bytes a client sent that are not UTF-8 (a header, kept by aiohttp as surrogates)
        # must not make the line itself invalid UTF-8: each becomes "?".
        return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


class Redaction(logging.Filter):
    """Masks secrets in a record's message and traceback before any handler sees it, and
    turns aiohttp's traceback of a malformed request head (a 4xx it answered itself) into
    one info line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            record.levelno, record.levelname = logging.INFO, logging.getLevelName(logging.INFO)
            record.msg = f"{record.getMessage()}: {exc.code} {exc.message}"
            record.args, record.exc_info, record.exc_text = None, None, None
        record.msg, record.args = redact_text(record.getMessage()), None
        if record.exc_info and record.exc_info[0] is not None:
            record.exc_text = redact_text("".join(traceback.format_exception(*record.exc_info)))
        return True


# Loggers of libraries whose lines can quote a request (headers, cookies) or its parse.
REDACTED_LOGGERS = ("aiohttp", "aiohttp.server", "aiohttp.access", "aiohttp.web",
                    "aiohttp.internal", "aiohttp.client", "asyncio")  # fmt: skip
_HANDLER_NAME = "elova-json"


def configure_logging(level: str) -> None:
    """JSON lines on stdout for the whole process (idempotent)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(Redaction())
    root.addHandler(handler)
    for name in REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, Redaction) for f in logger.filters):
            logger.addFilter(Redaction())
    root.setLevel(level)
    # Our access line replaces aiohttp's, which would log query strings verbatim.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def current_request_id() -> str | None:
    """The id of the request being served by this task, if any."""
    return _REQUEST_ID.get()


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
        context = _REQUEST_ID.set(request_id)
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
            _REQUEST_ID.reset(context)

    return middleware


def _log_access(
    request: web.Request,
    route: str | None,
    status: int,
    seconds: float,
    response: web.StreamResponse | None,
    sampler: RefusalSampler,
) -> None:
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
    fields: dict[str, Any] = {
        "event": "http_request",
        "method": request.method,
        "path": request.path,  # never the query string: it can carry codes and tokens
        "route": route,
        "status": status,
        "duration_ms": round(seconds * 1000, 2),
        "response_bytes": _response_bytes(response),
        "client": client_address(request),
        "user_agent": request.headers.get("User-Agent", "")[:200] or None,
    }
    caller = request.get(CALLER)
    if caller is not None:
        fields["account_id"] = str(caller.account_id)
        fields["approval_id"] = str(caller.approval_id)
        fields["client_id"] = caller.client_id
    annotations = request.get(LOG_FIELDS)
    if annotations:
        fields.update(annotations)
    ACCESS.log(level, "%s %s %d", request.method, request.path, status, extra=fields)


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
LOG_FIELDS: web.RequestKey[dict[str, Any]] = web.RequestKey("log_fields")


def annotate(request: web.Request, **fields: Any) -> None:
    """Add fields to this request's access line, e.g. annotate(request, mcp_method=..., tool=...).
    Values are redacted like every other field."""
    request.setdefault(LOG_FIELDS, {}).update(fields)


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


def setup_request_log(app: web.Application) -> None:
    """Register the request-id/access-log middleware (outermost), the header hook and the
    sampler of refusals' access lines."""
    sampler = app[REFUSAL_SAMPLER] = RefusalSampler()
    app.middlewares.insert(0, request_log_middleware(app[METRICS], sampler))
    app.on_response_prepare.append(_stamp_request_id)
    app.on_cleanup.append(_flush_refusals)
