"""Structured JSON logs: the formatter, redaction, and the request a line belongs to.

Every line is one JSON object on stdout. Every line logged while a request runs carries its
request id (`CURRENT_REQUEST_ID`, bound by the access log, service/server/access_log.py)
and, when the request is traced, its trace and span ids. Nothing secret reaches a line:
fields named like credentials are replaced, and bearer tokens, JWTs, URL passwords, PEM
keys, credential query parameters and cookies (Cookie / Set-Cookie values, our cookies by
name) are masked in every message, field and stack trace. `Redaction`, a filter on the
handler and on the loggers of aiohttp and asyncio, masks the same in every record before
any handler (ours, or another's) formats it; a malformed request head, which aiohttp logs
as an error with a traceback quoting the header line, becomes one info line (a client's
mistake, not ours).

`annotate` adds fields to the access line of the request being served.

Lines leave through service/observability/stdout.py, which never blocks the event loop: when
stdout is a pipe that stays full, a log line is dropped and counted
(`elova_mcp_log_lines_dropped_total`) instead of freezing the process.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from service.observability.stdout import LineOutput, line_output
from service.observability.trace_ids import current_trace_ids

# The id of the request this task serves (set by the access log's middleware).
CURRENT_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "elova_request_id", default=None
)
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
        request_id = CURRENT_REQUEST_ID.get()
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


class LineHandler(logging.Handler):
    """Each record as one line on a LineOutput; a line the full pipe cannot take is dropped
    and counted there (never a wait: the event loop writes the log)."""

    def __init__(self, output: LineOutput) -> None:
        super().__init__()
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        try:
            taken = self.output.offer((self.format(record) + "\n").encode("utf-8"))
        except Exception:
            self.handleError(record)
            return
        if not taken:
            self.output.drop()


def configure_logging(level: str) -> None:
    """JSON lines on stdout for the whole process (idempotent), never blocking on it."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = LineHandler(line_output(sys.stdout))
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
    return CURRENT_REQUEST_ID.get()


LOG_FIELDS: web.RequestKey[dict[str, Any]] = web.RequestKey("log_fields")


def annotate(request: web.Request, **fields: Any) -> None:
    """Add fields to this request's access line, e.g. annotate(request, mcp_method=..., tool=...).
    Values are redacted like every other field."""
    request.setdefault(LOG_FIELDS, {}).update(fields)
