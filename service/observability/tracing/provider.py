"""The OpenTelemetry SDK, configured by the environment alone: imported only when tracing is
configured (service/observability/tracing/hooks.py).

`start_tracing` builds the process's provider (`Tracing`) from the SDK's own variables;
nothing here parses them again, and the one default of ours is the service name,
`elova-mcp`, where no variable names one. Spans leave through a batch processor (a thread
of the SDK's: the request path only queues them; a full queue drops spans, never waits), so
an exporter that is slow or down costs a request nothing but the queueing.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode

from service import __version__
from service.observability.tracing.sampling import CallerBoundSampler
from service.observability.tracing.statements import statement_attributes
from service.settings.tracing import trust_incoming

SCOPE = "elova-mcp"
DEFAULT_SERVICE_NAME = "elova-mcp"


def _resource() -> Resource:
    resource = Resource.create({})
    named = str(resource.attributes.get(SERVICE_NAME, ""))
    if named.startswith("unknown_service"):  # neither OTEL_SERVICE_NAME nor the attributes
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
    if SERVICE_VERSION not in resource.attributes:
        resource = resource.merge(Resource({SERVICE_VERSION: __version__}))
    return resource


class Tracing:
    """The process's tracer provider and the spans the hooks start."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer(SCOPE, __version__)

    def shutdown(self) -> None:
        """Queued spans exported (bounded by the exporter's timeout), then the exporter closed."""
        self.provider.shutdown()

    @contextlib.contextmanager
    def redis_span(self, operation: str, script: str) -> Iterator[None]:
        """EVALSHA of one admission script: its name, never its keys or arguments. Not made
        current: nothing runs beneath it."""
        parent = trace.get_current_span()
        if not parent.is_recording():
            yield None  # only within a recorded request: no root span a Redis call
            return
        attributes = {
            "db.system.name": "redis",
            "db.operation.name": operation,
            "db.stored_procedure.name": script,
            "db.query.summary": f"{operation} {script}",
        }
        span = self.tracer.start_span(
            f"{operation} {script}", kind=SpanKind.CLIENT, attributes=attributes
        )
        try:
            yield None
        except BaseException as err:
            span.set_attribute("error.type", type(err).__qualname__)
            span.set_status(Status(StatusCode.ERROR))
            raise
        finally:
            span.end()

    def statement_logger(self, query: Any) -> None:
        """An asyncpg query logger (run by the loop right after a statement, in the context
        of the task that ran it): one CLIENT span with the statement's summary, its timing
        from asyncpg's, and never its text's values or its bound arguments."""
        if not trace.get_current_span().is_recording():
            return  # statements outside a recorded request (start-up, background work)
        end = time.time_ns()
        start = end - int(query.elapsed * 1e9)
        summary, attributes = statement_attributes(query.query, query.conn_addr, query.conn_params)
        span = self.tracer.start_span(
            summary, kind=SpanKind.CLIENT, attributes=attributes, start_time=start
        )
        err = query.exception
        if err is not None:
            state = getattr(err, "sqlstate", None)
            span.set_attribute("error.type", state or type(err).__qualname__)
            if state:
                span.set_attribute("db.response.status_code", state)
            span.set_status(Status(StatusCode.ERROR))
        span.end(end)


# The longest attribute value a span keeps (a JSON-RPC id or a session id is the client's
# choice); OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT or OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT
# overrides it.
ATTRIBUTE_CHARS = 1024
_LENGTH_VARIABLES = ("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT")


def start_tracing() -> Tracing:
    """The provider the environment describes, exporting over OTLP/HTTP in batches; a
    caller's sampled flag honoured only when ELOVA_TRACING_TRUST_INCOMING is true, and every
    attribute bounded (sampling.py).

    The SDK reads its own variables: OTEL_TRACES_SAMPLER(+_ARG) for the sampler (default
    parentbased_always_on), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES for the resource,
    OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT / _HEADERS / _TIMEOUT / _COMPRESSION for the
    OTLP/HTTP exporter, OTEL_BSP_* for the batch span processor, OTEL_PROPAGATORS for the
    propagators (default W3C Trace Context and Baggage)."""
    sampler = CallerBoundSampler(
        sampling._get_from_env_or_default(), trust_incoming=trust_incoming(os.environ)
    )
    own_limit = not any(os.environ.get(name, "").strip() for name in _LENGTH_VARIABLES)
    limits = SpanLimits(max_attribute_length=ATTRIBUTE_CHARS) if own_limit else SpanLimits()
    provider = TracerProvider(
        sampler=sampler, resource=_resource(), shutdown_on_exit=False, span_limits=limits
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return Tracing(provider)
