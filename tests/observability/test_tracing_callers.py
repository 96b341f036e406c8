"""What a caller may decide about traces, black box: real `elova-mcp serve` processes exporting
to a real OTLP receiver (tests/support/otlp.py). A `traceparent …-01` (with a trace id
chosen to pass any ratio) does not force a 401 to be recorded under a ratio sampler, unless
ELOVA_TRACING_TRUST_INCOMING says callers are trusted; and no attribute of a recorded span
is over 1 KiB, whatever the JSON-RPC id, Mcp-Session-Id or tracestate sent."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.support.mcp_wire import tool_call
from tests.support.otlp import OtlpReceiver
from tests.support.server import ServeProcesses
from tests.support.services import TestDatabase

CALLS = 30


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


def _serve(dsn: str, receiver: OtlpReceiver, sampler: str, **env: str) -> ServeProcesses:
    server = ServeProcesses(dsn, env=env)
    server.env.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50",
        "OTEL_TRACES_SAMPLER": sampler, "OTEL_TRACES_SAMPLER_ARG": "0.0001",
    })  # fmt: skip
    return server  # started by `with`


async def _forced_401s(server: ServeProcesses) -> set[str]:
    """CALLS unauthenticated calls, each claiming a sampled parent whose trace id passes any
    ratio (its low 64 bits zero); their trace ids."""
    ids = set()
    async with aiohttp.ClientSession() as http:
        for _ in range(CALLS):
            trace_id = secrets.token_hex(8) + "0" * 16
            ids.add(trace_id)
            body, headers = tool_call("get_many_workspaces", {})
            headers["traceparent"] = f"00-{trace_id}-{secrets.token_hex(8)}-01"
            async with http.post(server.mcp_url, json=body, headers=headers) as resp:
                assert resp.status == 401
    return ids


@pytest.mark.timeout(90)
async def test_a_caller_cannot_force_sampling_unless_trusted(
    test_database: TestDatabase, receiver: OtlpReceiver
) -> None:
    with _serve(test_database.dsn, receiver, "parentbased_traceidratio") as server:
        forced = await _forced_401s(server)
        await asyncio.sleep(1.0)  # the batch processor exports every 50 ms
    assert not {s.trace_id for s in receiver.snapshot()} & forced
    with _serve(test_database.dsn, receiver, "parentbased_traceidratio",
                TRACING_TRUST_INCOMING="true") as server:  # fmt: skip
        trusted = await _forced_401s(server)
        spans = await asyncio.to_thread(
            receiver.wait_for, lambda got: trusted <= {s.trace_id for s in got}
        )
    assert trusted <= {s.trace_id for s in spans}


@pytest.mark.timeout(90)
async def test_no_attribute_of_a_span_is_over_1_kib(
    test_database: TestDatabase, receiver: OtlpReceiver
) -> None:
    with _serve(test_database.dsn, receiver, "always_on") as server:
        body, headers = tool_call("get_many_workspaces", {}, request_id="i" * 30_000)
        headers["MCP-Protocol-Version"] = "2025-11-25"
        headers["Mcp-Session-Id"] = "s" * 8000
        headers["traceparent"] = f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"
        headers["tracestate"] = ",".join(f"k{i}={'v' * 240}" for i in range(32))[:8000]
        body["params"].pop("_meta")
        async with (
            aiohttp.ClientSession() as http,
            http.post(server.mcp_url, json=body, headers=headers) as resp,
        ):
            await resp.read()
        started = time.monotonic()
        spans = await asyncio.to_thread(
            receiver.wait_for, lambda got: any(s.attributes.get("jsonrpc.request.id") for s in got)
        )
    assert time.monotonic() - started < 30
    (span,) = [s for s in spans if s.attributes.get("jsonrpc.request.id")]
    assert span.attributes["jsonrpc.request.id"] == "i" * 1024  # kept, bounded
    assert all(len(str(value)) <= 1024 for s in spans for value in s.attributes.values())
    assert all(len(s.trace_state) <= 512 for s in spans)
