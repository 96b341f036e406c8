"""The latency the in-flight limit is given (service/server/overload/shedding.py,
`count_in_flight`) on the real listener site `serve` uses, over raw sockets:

- it is counted from the request's last bytes, so time the request then waits for the event
  loop (behind other connections' work) is part of it;
- and not from its first bytes, so a client that trickles its request does not make this
  replica's calls look slow (one slow client would otherwise shrink the limit for all).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
from aiohttp import web

from service.app import create_app
from service.app_keys import OVERLOAD
from service.config import Config
from service.server import connections
from service.server.overload.inflight_limit import FixedLimit
from tests.bench import scenarios
from tests.support.server import free_port

PAUSE = 0.4  # seconds: the loop stall, and the trickling client's pause
# The bench's tool call with a token that is not one: /mcp answers 401, a shed route.
CALL = scenarios.tool_call("not-a-token", "list_workspaces", {})
BODY = CALL.body.encode()


@dataclass
class RecordedLimit(FixedLimit):
    """The fixed cap, keeping every latency it is given."""

    latencies: list[float] = field(default_factory=list)

    def observe(self, started: float, finished: float, inflight: int) -> bool:
        self.latencies.append(finished - started)
        return super().observe(started, finished, inflight)


@dataclass
class Served:
    port: int
    limit: RecordedLimit


@pytest.fixture
async def served(make_config: Callable[..., Config]) -> AsyncIterator[Served]:
    port = free_port()
    cfg = make_config(METRICS_PORT="0", PORT=str(port), PACE_REFUSALS_AFTER="0")
    app = create_app(cfg)
    limit = RecordedLimit(20)
    app[OVERLOAD].limit = limit
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await connections.listener_site(runner, cfg).start()
    try:
        yield Served(port, limit)
    finally:
        await runner.cleanup()


def head(length: int) -> bytes:
    lines = [f"{name}: {value}" for name, value in CALL.headers.items()]
    lines += ["Host: 127.0.0.1", f"Content-Length: {length}"]
    return ("POST /mcp HTTP/1.1\r\n" + "\r\n".join(lines) + "\r\n\r\n").encode()


async def status_of(reader: asyncio.StreamReader) -> int:
    status_line = await asyncio.wait_for(reader.readline(), 10)
    return int(status_line.split()[1])


async def test_the_wait_for_the_loop_is_part_of_the_latency(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work queued on the loop when the request's bytes come in (here a stall scheduled just
    before the connection reads them) runs before the request: its latency includes it."""
    received = connections.Connection.data_received
    stalled: list[bool] = []

    def data_received(self: connections.Connection, data: bytes) -> None:
        if not stalled:
            stalled.append(True)
            asyncio.get_running_loop().call_soon(time.sleep, PAUSE)
        received(self, data)

    monkeypatch.setattr(connections.Connection, "data_received", data_received)
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(head(len(BODY)) + BODY)
    assert await status_of(reader) == 401
    writer.close()
    assert stalled and len(served.limit.latencies) == 1
    assert served.limit.latencies[0] >= PAUSE * 0.9


async def test_a_trickled_request_is_timed_from_its_last_bytes(served: Served) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
    writer.write(head(len(BODY)))
    await writer.drain()
    await asyncio.sleep(PAUSE)
    writer.write(BODY[:10])
    await writer.drain()
    await asyncio.sleep(PAUSE)
    writer.write(BODY[10:])
    started = time.monotonic()
    assert await status_of(reader) == 401
    answered = time.monotonic() - started
    writer.close()
    assert len(served.limit.latencies) == 1
    assert served.limit.latencies[0] <= answered < PAUSE
