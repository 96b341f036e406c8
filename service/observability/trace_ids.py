"""The trace and span ids of the request being served, for log and audit lines.

One question, one answer: every line that names a traced request (the request log, the
audit trail) asks `current_trace_ids()`. Until tracing is configured there is no trace, and
the answer is None; so it is for a request whose trace was not sampled (its spans go
nowhere, an id would point at nothing). The MCP server span (service/mcp/span.py) binds
the ids of a request when the span starts; they stay bound for the rest of the request's task, so
the access line written after the answer carries them too (aiohttp serves each request in
a task of its own).
"""

from __future__ import annotations

import contextvars

_IDS: contextvars.ContextVar[tuple[str, str] | None] = contextvars.ContextVar(
    "elova_trace_ids", default=None
)


def current_trace_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) as lowercase hex (32 and 16 digits), or None when not traced."""
    return _IDS.get()


def bind_trace_ids(trace_id: int, span_id: int) -> None:
    """The ids of the request being served from now on in this task (service/mcp/span.py)."""
    _IDS.set((f"{trace_id:032x}", f"{span_id:016x}"))
