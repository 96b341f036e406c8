"""The trace and span ids of the request being served, for log and audit lines.

One question, one answer: every line that names a traced request (the request log, the
audit trail) asks `current_trace_ids()`. Until tracing is configured there is no trace, and
the answer is None.
"""

from __future__ import annotations


def current_trace_ids() -> tuple[str, str] | None:
    """(trace_id, span_id) as lowercase hex (32 and 16 digits), or None when not traced."""
    return None
