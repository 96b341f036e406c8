"""A small OTLP/HTTP trace receiver on loopback, in a thread of its own: what a collector
would see of the service's spans (POST /v1/traces, protobuf, gzip or not).

    with OtlpReceiver() as receiver:          # endpoint: receiver.endpoint
        ... spans = receiver.wait_for(lambda spans: ..., timeout=10)

`keep=False` makes it a sink that answers and discards (the benchmark's exporter target).
"""

from __future__ import annotations

import asyncio
import gzip
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

ANSWER = ExportTraceServiceResponse().SerializeToString()


@dataclass
class ReceivedSpan:
    """One span as the receiver decoded it, with its resource's attributes."""

    name: str
    kind: int  # the protobuf enum: 2 SERVER, 3 CLIENT
    trace_id: str
    span_id: str
    parent_span_id: str
    trace_state: str
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int  # 2: ERROR
    links: list[tuple[str, str]] = field(default_factory=list)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind is not None else None


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


class OtlpReceiver:
    def __init__(self, *, keep: bool = True) -> None:
        self.keep = keep
        self.port = 0
        self.bodies: list[bytes] = []  # the raw requests (for searching what they carry)
        self.spans: list[ReceivedSpan] = []
        self.requests = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/traces", self._traces)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _traces(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests += 1
        if self.keep:
            if request.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            decoded = ExportTraceServiceRequest.FromString(body)
            with self._lock:
                self.bodies.append(body)
                self.spans.extend(_spans(decoded))
        return web.Response(body=ANSWER, content_type="application/x-protobuf")

    def snapshot(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """Every span received, once `found` holds of them (else AssertionError)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.snapshot()
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans not received within {timeout} s: {spans!r}")
            time.sleep(0.05)

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(self.bodies)


def _spans(request: ExportTraceServiceRequest) -> list[ReceivedSpan]:
    out = []
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    ReceivedSpan(
                        name=span.name,
                        kind=span.kind,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex(),
                        trace_state=span.trace_state,
                        attributes=_attributes(span.attributes),
                        resource=resource,
                        status_code=span.status.code,
                        links=[(link.trace_id.hex(), link.span_id.hex()) for link in span.links],
                    )
                )
    return out
