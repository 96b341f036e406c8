"""OpenTelemetry traces, black box: real `elova-mcp serve` processes configured only by the
standard OTEL_* variables, exporting over OTLP/HTTP to a receiver of the test's own
(tests/support/otlp.py), against the real PostgreSQL and Redis.

Spans, names and attributes (the MCP semantic conventions), parentage from the
`traceparent` header and from `params._meta` (which wins), tracestate carried, the
PostgreSQL and Redis child spans, nothing secret in any span, the trace on the access
line, the MCP server metric and its exemplars, the sampler's ratio, and tracing off (no
SDK loaded) when nothing configures it.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from service.observability.metrics.labels import OPERATION_BUCKETS
from service.observability.tracing.hooks import FLUSH_SECONDS
from tests.clients.dataset import Dataset, load
from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.server import ServeProcesses, free_port
from tests.support.services import TestDatabase

MODERN = "2026-07-28"
SESSION_REVISION = "2025-11-25"
SERVER, CLIENT, ERROR = 2, 3, 2  # the protobuf enums of span kind and status
RAISED = {"LIMIT_APPROVAL_PER_MINUTE": "100000", "LIMIT_ACCOUNT_CONCURRENCY": "64",
          "LIMIT_GLOBAL_CONCURRENCY": "64", "LOG_LEVEL": "INFO"}  # fmt: skip


def _otel(receiver: OtlpReceiver, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "elova-mcp-under-test",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: spans leave quickly for the test
        **more,
    }


def _serve(dsn: str, otel: dict[str, str]) -> ServeProcesses:
    metrics_port = free_port()
    server = ServeProcesses(dsn, env={**RAISED, "METRICS_PORT": str(metrics_port)})
    server.env.update(otel)  # not ELOVA_*: the SDK's own variables
    server.metrics_port = metrics_port  # type: ignore[attr-defined]
    return server.start()


@pytest.fixture(scope="module")
def dataset(test_database: TestDatabase) -> Dataset:
    return load(test_database.dsn)


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced(test_database: TestDatabase, receiver: OtlpReceiver) -> Iterator[ServeProcesses]:
    server = _serve(test_database.dsn, _otel(receiver))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def token(traced: ServeProcesses, dataset: Dataset) -> tuple[str, str]:
    issued = asyncio.run(traced.approve(account=dataset.account_email, workspaces=dataset.granted))
    return issued.access_token, str(issued.approval_id)


def _traceparent(sampled: bool = True) -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-{'01' if sampled else '00'}", trace_id, span_id


def _modern(method: str, params: dict[str, Any], meta: dict[str, str] | None = None) -> bytes:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "trace-test", "version": "1"},
                **(meta or {}),
            },
        },
    }
    return json.dumps(body).encode()


async def _post(
    server: ServeProcesses, token: str, method: str, params: dict[str, Any], *,
    meta: dict[str, str] | None = None, headers: dict[str, str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    sent = {
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
        **({"Mcp-Name": params["name"]} if "name" in params else {}),
        **(headers or {}),
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.mcp_url, data=_modern(method, params, meta), headers=sent) as resp,
    ):
        answer: dict[str, Any] = await resp.json(content_type=None)
        return answer


def _in_trace(trace_id: str, kind: int = SERVER) -> Any:
    return lambda spans: any(s.trace_id == trace_id and s.kind == kind for s in spans)


def _server_span(spans: list[ReceivedSpan], trace_id: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.trace_id == trace_id and s.kind == SERVER]
    return span


async def test_a_tool_call_is_one_server_span_with_postgresql_and_redis_children(
    traced: ServeProcesses, receiver: OtlpReceiver, dataset: Dataset, token: tuple[str, str]
) -> None:
    header, trace_id, parent_id = _traceparent()
    arguments = {"workspaceId": dataset.workspace_id, "limit": 3, "status": "error"}
    answer = await _post(traced, token[0], "tools/call",
                         {"name": "get_many_executions", "arguments": arguments},
                         headers={"traceparent": header, "tracestate": "vendor=abc"})  # fmt: skip
    assert answer["result"]["isError"] is False

    def children_too(spans: list[ReceivedSpan]) -> bool:
        mine = [s for s in spans if s.trace_id == trace_id]
        found = {s.attributes.get("db.system.name") for s in mine} | {s.kind for s in mine}
        return found >= {"postgresql", "redis", SERVER}

    spans = receiver.wait_for(children_too)
    server = _server_span(spans, trace_id)
    assert server.name == "tools/call get_many_executions"
    assert server.parent_span_id == parent_id  # the header's span is the parent
    assert server.trace_state == "vendor=abc"
    assert server.resource["service.name"] == "elova-mcp-under-test"
    assert server.resource["deployment.environment.name"] == "test"
    port = int(traced.base_url.rsplit(":", 1)[1])
    assert server.attributes == {
        "mcp.method.name": "tools/call",
        "mcp.protocol.version": MODERN,
        "jsonrpc.request.id": "7",
        "gen_ai.tool.name": "get_many_executions",
        "gen_ai.operation.name": "execute_tool",
        "http.request.method": "POST",
        "http.response.status_code": 200,
        "url.path": "/mcp",
        "url.scheme": "http",
        "server.address": "127.0.0.1",
        "server.port": port,
        "client.address": "127.0.0.1",
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "network.transport": "tcp",
    }
    assert server.status_code != ERROR
    children = [s for s in spans if s.trace_id == trace_id and s is not server]
    assert all(s.kind == CLIENT and s.parent_span_id == server.span_id for s in children)
    statements = [s for s in children if s.attributes["db.system.name"] == "postgresql"]
    assert statements and all(s.name == s.attributes["db.query.summary"] for s in statements)
    assert any("executions" in s.name.split()[1:] for s in statements), [s.name for s in statements]
    assert all("db.query.text" not in s.attributes for s in statements)
    assert {s.attributes.get("db.namespace") for s in statements} == {
        traced.env["ELOVA_DATABASE_URL"].rsplit("/", 1)[1]
    }
    (redis,) = [s for s in children if s.attributes["db.system.name"] == "redis"]
    assert redis.name == "EVALSHA admit"
    assert redis.attributes["db.operation.name"] == "EVALSHA"
    # The SDK and its exporter are loaded here (the protobuf runtime's native module is
    # mapped): what test_off_unless_configured finds absent.
    assert "_upb" in Path(f"/proc/{traced._procs[0].pid}/maps").read_text()


async def test_meta_traceparent_wins_over_the_header_which_becomes_a_link(
    traced: ServeProcesses, receiver: OtlpReceiver, token: tuple[str, str]
) -> None:
    outer, outer_trace, outer_span = _traceparent()
    inner, inner_trace, inner_span = _traceparent()
    meta = {"traceparent": inner, "tracestate": "rojo=00f067aa0ba902b7", "baggage": "k=v"}
    await _post(traced, token[0], "tools/list", {}, meta=meta, headers={"traceparent": outer})
    server = _server_span(receiver.wait_for(_in_trace(inner_trace)), inner_trace)
    assert server.name == "tools/list"
    assert server.parent_span_id == inner_span
    assert server.trace_state == "rojo=00f067aa0ba902b7"
    assert server.links == [(outer_trace, outer_span)]
    assert "gen_ai.tool.name" not in server.attributes
    assert not [s for s in receiver.snapshot() if s.trace_id == outer_trace]
    # A malformed `_meta.traceparent` is as if there were none: the header is the parent.
    header, header_trace, header_span = _traceparent()
    await _post(traced, token[0], "tools/list", {}, meta={"traceparent": "00-zz-yy-01"},
                headers={"traceparent": header})  # fmt: skip
    fallback = _server_span(receiver.wait_for(_in_trace(header_trace)), header_trace)
    assert (fallback.parent_span_id, fallback.links) == (header_span, [])


async def test_failures_carry_error_type(
    traced: ServeProcesses, receiver: OtlpReceiver, dataset: Dataset, token: tuple[str, str]
) -> None:
    cases = [  # (method, params, token, expected error.type, span name)
        ("tools/call", {"name": "get_many_executions", "arguments": {"limit": 3}}, token[0],
         "tool_error", "tools/call get_many_executions"),
        ("tools/call", {"name": "no_such_tool", "arguments": {}}, token[0], "-32602",
         "tools/call"),
        ("tools/list", {}, "not-a-token", "401", "tools/list"),
    ]  # fmt: skip
    traces = []
    for method, params, bearer, _error, _name in cases:
        header, trace_id, _ = _traceparent()
        await _post(traced, bearer, method, params, headers={"traceparent": header})
        traces.append(trace_id)
    spans = receiver.wait_for(lambda spans: all(_in_trace(t)(spans) for t in traces))
    for trace_id, (_m, _p, _t, error, name) in zip(traces, cases, strict=True):
        server = _server_span(spans, trace_id)
        assert (server.name, server.attributes.get("error.type")) == (name, error)
        assert server.status_code == ERROR


async def test_a_session_revision_names_its_session(
    traced: ServeProcesses, receiver: OtlpReceiver, token: tuple[str, str]
) -> None:
    header, trace_id, _ = _traceparent()
    body = {"jsonrpc": "2.0", "id": "init-1", "method": "initialize",
            "params": {"protocolVersion": SESSION_REVISION, "capabilities": {},
                       "clientInfo": {"name": "trace-test", "version": "1"}}}  # fmt: skip
    headers = {"Authorization": f"Bearer {token[0]}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream", "traceparent": header}  # fmt: skip
    async with aiohttp.ClientSession() as session:
        async with session.post(traced.mcp_url, json=body, headers=headers) as resp:
            session_id = resp.headers["Mcp-Session-Id"]
        list_header, list_trace, _ = _traceparent()
        more = {**headers, "Mcp-Session-Id": session_id, "MCP-Protocol-Version": SESSION_REVISION,
                "traceparent": list_header}  # fmt: skip
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        async with session.post(traced.mcp_url, json=listing, headers=more) as resp:
            assert resp.status == 200
    spans = receiver.wait_for(lambda s: _in_trace(trace_id)(s) and _in_trace(list_trace)(s))
    opened, listed = _server_span(spans, trace_id), _server_span(spans, list_trace)
    assert opened.attributes["mcp.session.id"] == session_id
    assert opened.attributes["mcp.protocol.version"] == SESSION_REVISION
    assert opened.attributes["jsonrpc.request.id"] == "init-1"
    assert listed.attributes["mcp.session.id"] == session_id


async def test_no_span_holds_a_token_an_argument_or_an_approval(
    traced: ServeProcesses, receiver: OtlpReceiver, dataset: Dataset, token: tuple[str, str]
) -> None:
    header, trace_id, _ = _traceparent()
    arguments = {"workspaceId": dataset.workspace_id, "executionId": dataset.execution_id}
    await _post(traced, token[0], "tools/call", {"name": "get_execution", "arguments": arguments},
                headers={"traceparent": header})  # fmt: skip
    receiver.wait_for(lambda s: _in_trace(trace_id, CLIENT)(s) and _in_trace(trace_id)(s))
    raw = receiver.raw()
    for secret in (token[0], token[0].split(".")[-1], token[1], dataset.workspace_id,
                   dataset.execution_id, dataset.account_email, "Bearer"):  # fmt: skip
        assert secret.encode() not in raw, secret
        assert uuid.UUID(secret).bytes not in raw if _is_uuid(secret) else True


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


async def test_the_access_line_carries_the_trace(
    traced: ServeProcesses, receiver: OtlpReceiver, token: tuple[str, str]
) -> None:
    header, trace_id, _ = _traceparent()
    await _post(traced, token[0], "tools/list", {}, headers={"traceparent": header})
    server = _server_span(receiver.wait_for(_in_trace(trace_id)), trace_id)
    lines = [json.loads(line) for line in traced.output().splitlines() if line.startswith("{")]
    (line,) = [entry for entry in lines if entry.get("trace_id") == trace_id]
    assert line["event"] == "http_request" and line["span_id"] == server.span_id
    untraced, _, _ = _traceparent(sampled=False)  # parent-based: not sampled, no ids
    await _post(traced, token[0], "tools/list", {}, headers={"traceparent": untraced})
    lines = [json.loads(line) for line in traced.output().splitlines() if line.startswith("{")]
    assert lines[-1]["event"] == "http_request" and "trace_id" not in lines[-1]


async def test_the_mcp_server_metric_and_its_exemplars(
    traced: ServeProcesses, receiver: OtlpReceiver, token: tuple[str, str]
) -> None:
    header, trace_id, _ = _traceparent()
    await _post(traced, token[0], "tools/call",
                {"name": "get_many_executions", "arguments": {"limit": 3}},
                headers={"traceparent": header})  # fmt: skip
    url = f"http://127.0.0.1:{traced.metrics_port}/metrics"  # type: ignore[attr-defined]
    async with aiohttp.ClientSession() as session:
        accept = {"Accept": "application/openmetrics-text; version=1.0.0"}
        async with session.get(url, headers=accept) as resp:
            assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
            text = await resp.text()
        async with session.get(url) as resp:
            assert resp.headers["Content-Type"].startswith("text/plain")
            assert "# {" not in await resp.text()  # no exemplars in the classic text
    families = {f.name: f for f in text_string_to_metric_families(text)}  # type: ignore[no-untyped-call]
    operation = families["mcp_server_operation_duration_seconds"]
    labels = {"mcp_method_name": "tools/call", "gen_ai_tool_name": "get_many_executions",
              "error_type": "tool_error"}  # fmt: skip
    buckets = [s for s in operation.samples if s.name.endswith("_bucket") and
               {k: s.labels[k] for k in labels} == labels]  # fmt: skip
    assert [float(s.labels["le"]) for s in buckets] == [
        *map(float, OPERATION_BUCKETS),
        float("inf"),
    ]
    assert any(s.exemplar and s.exemplar.labels["trace_id"] == trace_id for s in buckets)
    latency = families["elova_mcp_request_duration_seconds"]
    assert any(s.exemplar and s.exemplar.labels["trace_id"] == trace_id for s in latency.samples)
    ok = {"mcp_method_name": "tools/call", "gen_ai_tool_name": "get_workspace", "error_type": ""}
    assert any(s.labels == {**ok, "le": "+Inf"} for s in operation.samples)  # prefilled


def test_sampling_follows_otel_traces_sampler(
    test_database: TestDatabase, dataset: Dataset
) -> None:
    with OtlpReceiver() as receiver:
        ratio = _otel(receiver, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG="0.25")
        server = _serve(test_database.dsn, ratio)
        try:
            issued = asyncio.run(
                server.approve(account=dataset.account_email, workspaces=dataset.granted)
            )

            async def calls() -> None:
                for _ in range(200):
                    await _post(server, issued.access_token, "tools/list", {})

            asyncio.run(calls())
            spans = receiver.wait_for(lambda s: len(s) >= 20, timeout=10)
            server_spans = [s for s in spans if s.kind == SERVER]
            assert 20 <= len(server_spans) <= 90, len(server_spans)  # 50 expected of 200
        finally:
            server.stop()


def test_off_unless_configured(test_database: TestDatabase, dataset: Dataset) -> None:
    server = _serve(test_database.dsn, {})
    try:
        issued = asyncio.run(
            server.approve(account=dataset.account_email, workspaces=dataset.granted)
        )
        header, trace_id, _ = _traceparent()
        asyncio.run(
            _post(server, issued.access_token, "tools/list", {}, headers={"traceparent": header})
        )
        # No SDK, exporter or protobuf runtime in the process (their native module is mapped
        # as soon as the exporter is imported).
        maps = Path(f"/proc/{server._procs[0].pid}/maps").read_text()
        assert "opentelemetry" not in maps and "_upb" not in maps
        lines = [json.loads(text) for text in server.output().splitlines() if text[:1] == "{"]
        access = [entry for entry in lines if entry.get("event") == "http_request"]
        assert access and all("trace_id" not in entry for entry in access)
    finally:
        server.stop()


def test_a_silent_collector_does_not_hold_up_the_shutdown(
    test_database: TestDatabase, dataset: Dataset
) -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # connects, never answers
    nobody = f"http://127.0.0.1:{silent.getsockname()[1]}"
    server = ServeProcesses(test_database.dsn, env={**RAISED, "DRAIN_SECONDS": "0"},
                            graceful_stop=True)  # fmt: skip
    server.env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": nobody, "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    server.start()
    try:
        issued = asyncio.run(
            server.approve(account=dataset.account_email, workspaces=dataset.granted)
        )
        for _ in range(3):  # spans queued, none exported yet
            asyncio.run(_post(server, issued.access_token, "tools/list", {}))
    finally:
        started = time.monotonic()
        server.stop()  # SIGTERM, then the wait for the process's exit
        stopped = time.monotonic() - started
        silent.close()
    assert stopped < FLUSH_SECONDS + 4, stopped  # not the exporter's 10 s timeout
