"""The MCP SERVER span of one POST /mcp, after the OpenTelemetry semantic conventions for
MCP (status development; docs/operations.md, Tracing, names the version followed).

`start` names the span and finds its parent (`_parent`); `RequestSpan.finish` ends it with
the answer. What a span never holds: the bearer token or any header's value, the tool's
arguments, an approval, account or record id, an error's message (it can quote an
argument). The session id (2025 revisions) and the JSON-RPC request id are what the
conventions ask for. Why it is built so: docs/decisions/tracing.md.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from service.app_keys import CATALOG
from service.edge import headers as h
from service.edge.client_address import client_address
from service.mcp import protocol as p
from service.mcp.versions import MODERN, SUPPORTED, negotiate_session
from service.observability.trace_ids import bind_trace_ids
from service.observability.tracing.sampling import bounded_trace_state

if TYPE_CHECKING:
    from aiohttp import web

    from service.mcp.envelope import Incoming
    from service.mcp.rpc import Answer

PROPAGATED = ("traceparent", "tracestate", "baggage")
TOOL_CALL = "tools/call"
NAME_CHARS = 128


class RequestSpan:
    """A recorded request's span, current until `finish`."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._token = context.attach(trace.set_span_in_context(span))
        ids = span.get_span_context()
        bind_trace_ids(ids.trace_id, ids.span_id)

    def finish(self, answer: Answer) -> None:
        span = self._span
        span.set_attribute("http.response.status_code", answer.status)
        error = None
        if answer.rpc_code is not None:
            error = str(answer.rpc_code)
            span.set_attribute("rpc.response.status_code", error)
        elif answer.outcome.startswith("tool_error"):
            error = "tool_error"
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
        issued = answer.headers.get(h.SESSION_ID)  # initialize: the session it opened
        if issued is not None:
            span.set_attribute("mcp.session.id", issued)
        span.end()
        context.detach(self._token)

    def abandon(self, err: BaseException) -> None:
        """The handler ended without an answer (the client went away: cancelled)."""
        self._span.set_attribute("error.type", type(err).__qualname__)
        self._span.set_status(Status(StatusCode.ERROR))
        self._span.end()
        context.detach(self._token)


def start(
    tracer: Any, request: web.Request, incoming: Incoming | None, started: float
) -> RequestSpan | None:
    """The request's span when its trace is sampled, else None (nothing more is done for it:
    no child spans, no ids on its lines).

    Named `{mcp.method.name} {gen_ai.tool.name}` for a call of a catalog tool, else
    `{mcp.method.name}`; a request refused before it was a JSON-RPC request (406, 413, 415,
    a body that is not JSON) is `POST` with the HTTP attributes only. The span starts when
    the request's handling started (before its body was read) and ends with its answer."""
    parent, links = _parent(request, incoming)
    method = None if incoming is None else incoming.method
    tool = None if incoming is None else _tool_name(request, incoming)
    name = request.method if method is None else method if tool is None else f"{method} {tool}"
    name = name[:NAME_CHARS]  # an unknown method is the client's text
    begun = time.time_ns() - int((time.perf_counter() - started) * 1e9)
    # The sampler sees the name and the method; the rest is described only for a span that
    # is kept (most are not, at a low ratio).
    sampled = {} if method is None else {"mcp.method.name": method}
    span = tracer.start_span(
        name, parent, SpanKind.SERVER, sampled, links, begun, record_exception=False
    )
    if not span.is_recording():
        return None
    span.set_attributes(_described(request, incoming, tool))
    return RequestSpan(span)


def _parent(request: web.Request, incoming: Incoming | None) -> tuple[Any, list[Link]]:
    """The context in the request's `params._meta` (`traceparent`, `tracestate`, `baggage`)
    when it has a `traceparent`, else the same headers of the HTTP request, both through the
    configured propagators; when both are there and differ, the HTTP one is a link."""
    outer = propagate.extract(request.headers)
    meta = incoming.meta if incoming is not None else None
    if not isinstance(meta, dict) or not isinstance(meta.get("traceparent"), str):
        return outer, []
    carrier = {key: meta[key] for key in PROPAGATED if isinstance(meta.get(key), str)}
    inner = propagate.extract(carrier)
    outer_span = trace.get_current_span(outer).get_span_context()
    inner_span = trace.get_current_span(inner).get_span_context()
    if not inner_span.is_valid:  # a malformed `_meta.traceparent`: as if there were none
        return outer, []
    if outer_span.is_valid and outer_span != inner_span:
        linked = trace.SpanContext(
            outer_span.trace_id, outer_span.span_id, outer_span.is_remote,
            outer_span.trace_flags, bounded_trace_state(outer_span.trace_state),
        )  # fmt: skip
        return inner, [Link(linked)]
    return inner, []


def _described(request: web.Request, incoming: Incoming | None, tool: str | None) -> dict[str, Any]:
    host, _, port = request.host.rpartition(":") if ":" in request.host else (request.host, "", "")
    version = request.version
    attributes: dict[str, Any] = {
        "http.request.method": request.method,
        "url.path": request.path,
        "url.scheme": request.scheme,
        "server.address": host,
        "network.protocol.name": "http",
        "network.protocol.version": f"{version.major}.{version.minor}",
        "network.transport": "tcp",
        "client.address": client_address(request),
    }
    if port.isdigit():
        attributes["server.port"] = int(port)
    if incoming is None:
        return attributes
    if incoming.id is not None:
        attributes["jsonrpc.request.id"] = str(incoming.id)
    protocol = _protocol_version(request, incoming)
    if protocol is not None:
        attributes["mcp.protocol.version"] = protocol
    session = request.headers.get(h.SESSION_ID)
    if session is not None and not incoming.modern:
        attributes["mcp.session.id"] = session
    if tool is not None:
        attributes["gen_ai.tool.name"] = tool
        attributes["gen_ai.operation.name"] = "execute_tool"
    return attributes


def _protocol_version(request: web.Request, incoming: Incoming) -> str | None:
    if incoming.modern:
        return MODERN
    header = request.headers.get(h.PROTOCOL_VERSION)
    if header in SUPPORTED:
        return header
    params = incoming.params
    if incoming.method == "initialize" and isinstance(params, p.InitializeParams):
        return negotiate_session(params.protocol_version)
    return None


def _tool_name(request: web.Request, incoming: Incoming) -> str | None:
    """The tool a tools/call names, when the catalog has it (any other name a client sends
    would make span names unbounded)."""
    params = incoming.params
    if incoming.method != TOOL_CALL or not isinstance(params, p.CallToolParams):
        return None
    tool = request.app[CATALOG].tool(params.name)
    return None if tool is None else tool.name
