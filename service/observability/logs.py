"""Structured JSON logs: the formatter, redaction, and the request a line belongs to.

Every line is one JSON object on stdout (`JsonFormatter`, written by `LineHandler` through
service/observability/stdout.py, which never blocks the event loop), carrying the id of the
request it was logged in (`CURRENT_REQUEST_ID`, bound by service/server/access_log.py) and,
when the request is traced, its trace and span ids. Nothing secret reaches a line: `redact`
and `redact_text` mask fields and text, `Redaction` every record before any handler formats
it. `annotate` adds fields to the access line of the request being served. What a line holds
and why: docs/operations.md, Logs.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time
import traceback
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import msgspec
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

# The record attribute saying its message and fields were redacted where they were built.
_PRE_REDACTED = "_elova_redacted"

# Attributes every LogRecord has: anything else on a record came from `extra=` and is a field.
_RECORD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def _may_hold_secret(text: str) -> bool:
    """False when no pattern of `_SECRET_TEXT` can match: each needs one of these marks in
    the text, lower-cased (ASCII text only: a case-insensitive match folds other letters)."""
    if not text.isascii():
        return True
    t = text.lower()
    return ("=" in t or "://" in t or "eyj" in t or "bearer" in t or "basic" in t
            or "cookie" in t or "_token" in t or "-----begin" in t)  # fmt: skip


def redact_text(text: str) -> str:
    """Mask every credential-looking part of a string: bearer tokens, JWTs, URL passwords,
    PEM keys, credential query parameters and cookies (Cookie / Set-Cookie values, our
    cookies by name), in a message, a field or a stack trace alike."""
    if not _may_hold_secret(text):
        return text
    for pattern, replacement in _SECRET_TEXT:
        text = pattern.sub(replacement, text)
    return text


@lru_cache(maxsize=1024)
def _names_secret(key: str) -> bool:
    return _SECRET_KEY.search(key) is not None


# Field texts seen lately that redaction leaves as they are (a path, a user agent, an OAuth
# client's id: the same few on every line of a busy replica): found here, a text skips the
# patterns. A text that held a secret is never kept. Bounded by count and length.
_CLEAN_TEXTS: set[str] = set()
_CLEAN_TEXTS_MAX = 1024
_CLEAN_TEXT_CHARS = 512


def redact_field_text(text: str) -> str:
    """Text a client or a dependency controls, fit for a field: scrubbed and bounded."""
    if text in _CLEAN_TEXTS:
        return text
    redacted = redact_text(text)
    if redacted == text and len(text) <= _CLEAN_TEXT_CHARS:
        if len(_CLEAN_TEXTS) >= _CLEAN_TEXTS_MAX:
            _CLEAN_TEXTS.clear()
        _CLEAN_TEXTS.add(text)
    return redacted if len(redacted) <= _MAX_FIELD_CHARS else redacted[:_MAX_FIELD_CHARS] + "…"


def redact(key: str, value: Any) -> Any:
    """A field value fit for a log line: secrets by name masked (a field named like a
    credential is replaced whole), strings scrubbed, bounded."""
    if _names_secret(key):
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): redact(str(k), v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact(key, v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact_field_text(str(value))


def log_redacted(
    logger: logging.Logger, level: int, message: str, fields: Mapping[str, Any]
) -> None:
    """Log a line whose message and fields the caller built from text the service formats
    itself and text it passed through `redact_field_text` / `redact`: no handler scans them
    again. Only for lines on the hot path whose every field is known (the access line).

    When our line handler is the only place the line can go (nothing else configured:
    `_sole_line_handler`), the line is written to it directly, as its formatter would
    write it, without the LogRecord and the handler chain (about 600 Python opcodes a
    line). Otherwise (a test's capture, another handler) it is logged as any record, the
    fields on it as attributes, as with `extra=`, and as one mapping the formatter takes
    whole instead of scanning the record."""
    if not logger.isEnabledFor(level):
        return
    handler = _sole_line_handler(logger, level)
    if handler is not None and handler.write_line(
        _line_bytes(time.time(), level, logger.name, message, fields)
    ):
        return
    logger.log(level, message, extra={**fields, _PRE_REDACTED: fields})


def _sole_line_handler(logger: logging.Logger, level: int) -> LineHandler | None:
    """Our LineHandler, when it is the one handler a record of `logger` at `level` would
    reach and nothing on the way would filter or change it: no filter on the logger or its
    ancestors, no other handler, the handler's own filters only `Redaction` (which passes a
    pre-redacted line as it is)."""
    node: logging.Logger | None = logger
    while node is not None:
        if node.filters:
            return None
        if node.handlers:
            break
        if not node.propagate:
            return None
        node = node.parent
    if node is None or node.parent is not None and node.propagate:
        return None  # a handler below the root that also propagates: two places
    handlers = node.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if type(handler) is not LineHandler or level < handler.level:
        return None
    if not all(type(f) is Redaction for f in handler.filters):
        return None
    if type(handler.formatter) is not JsonFormatter:
        return None
    return handler


# Lines are compact JSON written by msgspec (~0.7 µs an access line against ~6 µs for the
# standard library's encoder); a value it has no encoding for is written as its str(), as
# json.dumps(default=str) did. Only a line holding text that is not UTF-8 (below) takes
# the standard library's encoder.
_ENCODER = msgspec.json.Encoder(enc_hook=str)
_NOT_UTF8_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"))
_second_text: tuple[int, str] = (-1, "")


def _timestamp(created: float) -> str:
    """ISO 8601 in UTC to the millisecond; the text of the second is kept between lines."""
    global _second_text
    second = int(created)
    if _second_text[0] != second:
        _second_text = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    millis = min(int((created - second) * 1000), 999)
    return f"{_second_text[1]}.{millis:03d}+00:00"


def _encoded(line: dict[str, Any]) -> bytes:
    """The line as UTF-8 JSON, without its newline."""
    try:
        return _ENCODER.encode(line)
    except UnicodeEncodeError:
        # Bytes a client sent that are not UTF-8 (a header, kept by aiohttp as surrogates)
        # must not make the line itself invalid UTF-8: each becomes "?".
        return _NOT_UTF8_ENCODER.encode(line).encode("utf-8", "replace")


def _head(created: float, level_name: str, name: str, message: str) -> dict[str, Any]:
    """What every line starts with: time, level, logger, message, and the request (and
    trace) the line was logged in."""
    line: dict[str, Any] = {
        "time": _timestamp(created),
        "level": level_name,
        "logger": name,
        "message": message,
    }
    request_id = CURRENT_REQUEST_ID.get()
    if request_id is not None:
        line["request_id"] = request_id
    traced = current_trace_ids()  # a traced request's lines carry its trace
    if traced is not None:
        line["trace_id"], line["span_id"] = traced
    return line


def _line_bytes(
    created: float, level: int, name: str, message: str, fields: Mapping[str, Any]
) -> bytes:
    """A pre-redacted line (`log_redacted`) as `JsonFormatter` writes it."""
    level_name = _LEVEL_NAMES.get(level) or logging.getLevelName(level).lower()
    line = _head(created, level_name, name, message)
    line.update(fields)
    return _encoded(line)


_LEVEL_NAMES = {
    level: logging.getLevelName(level).lower()
    for level in (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, request id, extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        pre_redacted: Mapping[str, Any] | None = record.__dict__.get(_PRE_REDACTED)
        message = record.getMessage()
        if pre_redacted is None:
            message = redact_text(message)
        line = _head(record.created, record.levelname.lower(), record.name, message)
        if pre_redacted is not None:  # the fields as `log_redacted` was given them
            line.update(pre_redacted)
        else:
            for key, value in record.__dict__.items():
                if key not in _RECORD_ATTRS and not key.startswith("_"):
                    line[key] = redact(key, value)
        if record.exc_info and record.exc_info[0] is not None:
            exc_type, exc, tb = record.exc_info
            line["error"] = {
                "type": exc_type.__name__,
                "stack": redact_text("".join(traceback.format_exception(exc_type, exc, tb))),
            }
        return _encoded(line).decode("utf-8")


class Redaction(logging.Filter):
    """Masks secrets in a record's message and traceback before any handler sees it, and
    turns aiohttp's traceback of a malformed request head (a 4xx it answered itself) into
    one info line (a client's mistake, not ours).

    A filter on our handler and on the loggers of aiohttp and asyncio, so it masks every
    record before any handler (ours, or another's) formats it. A line the service built
    from text it formats itself and text it redacted (`log_redacted`, the access line) says
    so and is not scanned again."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.__dict__.get(_PRE_REDACTED) is not None:
            return True
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
    and counted there, in `elova_mcp_log_lines_dropped_total` (never a wait: the event loop
    writes the log)."""

    def __init__(self, output: LineOutput) -> None:
        super().__init__()
        self.output = output

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._write(self.format(record).encode("utf-8"))
        except Exception:
            self.handleError(record)

    def write_line(self, line: bytes) -> bool:
        """A line encoded already, without its newline (`log_redacted`'s direct path);
        False when writing it failed, so that the caller logs it the usual way (which
        reports the failure)."""
        try:
            self._write(line)
        except Exception:
            return False
        return True

    def _write(self, line: bytes) -> None:
        if not self.output.offer(line + b"\n"):
            self.output.drop()


# What a LogRecord gathers that no line of ours shows (the logging HOWTO, "Optimization"):
# the caller's file and line (a walk up the stack), the thread, the process (a getpid
# system call), the multiprocessing name and the asyncio task (3.12 on), on every line.
_UNSHOWN_RECORD_FACTS = {"_srcfile": None, "logThreads": False, "logProcesses": False,
                         "logMultiprocessing": False, "logAsyncioTasks": False}  # fmt: skip


def configure_logging(level: str) -> None:
    """JSON lines on stdout for the whole process (idempotent), never blocking on it."""
    for name, value in _UNSHOWN_RECORD_FACTS.items():
        setattr(logging, name, value)
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
