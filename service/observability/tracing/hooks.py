"""OpenTelemetry traces of `/mcp` requests: off unless the standard OTEL_* variables say
where to send them (docs/operations.md, Tracing).

`ACTIVE` is the switch, set by `tracing_ctx` (which imports the SDK: provider.py) when the
configuration asks for traces; the hooks here import nothing of it, and are called from:
    service/mcp/transport.py   the MCP SERVER span of each POST (service/mcp/span.py)
    service/store/db.py        a CLIENT span a statement (`statement_logger`, statements.py)
    service/limits/shared_limiter.py   a CLIENT span for the admission's EVALSHA (`redis_span`)

Why off costs nothing, and why the tracer is the process's: docs/decisions/tracing.md.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

    from service.observability.tracing.provider import Tracing

# Every hook starts with `ACTIVE is None`: with tracing off a request pays one module
# attribute read a hook. One process serves one app (`elova-mcp serve`), so the active
# tracer is the process's.
ACTIVE: Tracing | None = None

_NOTHING: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def setup_tracing(app: web.Application) -> None:
    """Register the tracer's lifetime when the configuration asks for tracing
    (service/settings/tracing.py: an OTLP endpoint is set and the SDK not disabled)."""
    from service.app_keys import CONFIG

    if app[CONFIG].tracing:
        app.cleanup_ctx.append(tracing_ctx)


# The longest the shutdown waits for queued spans to leave: a collector that is down or
# silent must not hold up a rolling restart (the SDK would retry for its export timeout).
FLUSH_SECONDS = 3.0


async def tracing_ctx(app: web.Application) -> AsyncIterator[None]:
    """The tracer provider from the environment (the SDK reads its own variables: sampler,
    resource, exporter, batch processor, propagators), as `ACTIVE`; at cleanup, queued spans
    flushed and the exporter shut down, for FLUSH_SECONDS at most (in a daemon thread: the
    exporter's last POST is blocking I/O, and a process that exits does not wait for it)."""
    global ACTIVE
    import asyncio
    import threading

    from service.observability.tracing.provider import start_tracing

    tracing = start_tracing()
    ACTIVE = tracing
    try:
        yield
    finally:
        ACTIVE = None
        flushing = threading.Thread(target=tracing.shutdown, name="elova-trace-flush", daemon=True)
        flushing.start()
        await asyncio.to_thread(flushing.join, FLUSH_SECONDS)


def redis_span(operation: str, script: str) -> contextlib.AbstractContextManager[Any]:
    """A CLIENT span around one Redis call of the request being served (nothing when off)."""
    active = ACTIVE
    return _NOTHING if active is None else active.redis_span(operation, script)


def statement_logger() -> Callable[[Any], None] | None:
    """The asyncpg query logger that records a span a statement, or None when off."""
    active = ACTIVE
    return None if active is None else active.statement_logger
