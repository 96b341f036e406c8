"""The audit trail of an app (docs/operations.md, Audit trail; schema
docs/audit/audit-event.v1.schema.json): the writer's lifetime, and what the rest of the
service calls to record a line.

`setup_audit` starts the writer with the app and drains it at shutdown; `record` and
`record_line` queue a line, `context_of` gives it the request's ids and client address;
`unavailable_answer` is the 503 of a request whose line found no room in time (never an
answer without its line).
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

from aiohttp import hdrs, web

from service.app_keys import AUDIT, CONFIG, METRICS, REQUEST_ID
from service.audit.events import AuditEvent, Context
from service.audit.sinks import open_sink
from service.audit.writer import AuditWriter
from service.edge.client_address import address_behind, client_address
from service.errors import AuditUnavailable
from service.observability.logs import current_request_id
from service.observability.metrics.app_metrics import Metrics
from service.observability.stdout import line_output, register_metrics
from service.observability.trace_ids import current_trace_ids
from service.settings.proxies import TrustedProxies


def context_of(request: web.Request | None, proxies: TrustedProxies | None = None) -> Context:
    """Request id, trace and span ids and client address of the event being recorded
    (`proxies`: the app's trusted proxies, when the caller holds the app)."""
    ids = current_trace_ids()
    trace_id, span_id = ids if ids is not None else (None, None)
    if request is None:
        return Context(request_id=current_request_id(), trace_id=trace_id, span_id=span_id)
    return Context(
        request_id=request.get(REQUEST_ID) or current_request_id(),
        trace_id=trace_id,
        span_id=span_id,
        client_address=(
            client_address(request) if proxies is None else address_behind(request, proxies)
        ),
    )


async def record(app: web.Application, line: AuditEvent, *, refusal: bool = False) -> None:
    """Queue the line on the app's writer (AuditUnavailable when no room in time); the line
    of a refusal may be written in a batch (AuditWriter.record). An app assembled without
    `setup_audit` (a test composing parts of the service) has none."""
    writer = app.get(AUDIT)
    if writer is not None:
        await writer.record(line, refusal=refusal)


async def record_line(app: web.Application, line: bytes, *, refusal: bool = False) -> None:
    """`record` of a line already encoded (events.LineTemplate)."""
    writer = app.get(AUDIT)
    if writer is not None:
        await writer.record_line(line, refusal=refusal)


def unavailable_answer(err: AuditUnavailable) -> web.Response:
    """An OAuth or page request whose audit line found no room in time: 503, Retry-After
    (service/server/error_answers.py answers it; /mcp answers its own in JSON-RPC)."""
    return web.json_response(
        {"error": "temporarily_unavailable", "error_description": err.message},
        status=503,
        headers={hdrs.RETRY_AFTER: str(err.retry_after)},
    )


async def _writer_ctx(app: web.Application) -> AsyncIterator[None]:
    metrics = app[METRICS]
    # The audit metrics join the app's registry (a test may stand in for Metrics: then none).
    registry = metrics.registry if isinstance(metrics, Metrics) else None
    sink = open_sink(app[CONFIG].audit)
    writer = AuditWriter(app[CONFIG].audit, sink, registry)
    if registry is not None:  # stdout, shared by the log and the stdout sink: its drops
        register_metrics(line_output(sys.stdout), registry)
    app[AUDIT] = writer
    writer.start()
    yield
    await writer.drain()


def setup_audit(app: web.Application) -> None:
    """The writer, started with the app and drained at shutdown."""
    app.cleanup_ctx.append(_writer_ctx)
