"""The request edge under the faults of issue 42, against a real `elova-mcp serve`:

- stalled chunked uploads hold no capacity: while 30 connections each sent one 1-byte chunk
  and stalled, other callers' tool calls and `/token` get their normal answers, never the
  shed 503;
- a client that disconnects in the middle of its body is a client gone (499, counted in
  `abandoned_requests_total`), not a 500 and not an error-level line;
- a fresh replica with the default settings serves 8 clients calling one after another
  without shedding any of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from tests.bench import scenarios
from tests.mcp.conftest import approve
from tests.support.serve_process import ServeProcess
from tests.support.served_app import StartApp, samples, value

STALLED = 30  # past the default in-flight cap (2 x a pool of 10)
MCP_HEAD = (
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    b"Accept: application/json\r\n"
)


@pytest.fixture
async def serve(serve_env: dict[str, str]) -> AsyncIterator[Callable[..., ServeProcess]]:
    """Start `elova-mcp serve` with extra ELOVA_* settings; stopped at the end."""
    started: list[ServeProcess] = []

    def start(**settings: str) -> ServeProcess:
        proc = ServeProcess({**serve_env, **{f"ELOVA_{k}": v for k, v in settings.items()}})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.__aexit__(None, None, None)


def tool_call(token: str, workspace_id: object) -> tuple[bytes, dict[str, str]]:
    request = scenarios.tool_call(
        token, "get_many_executions", {"workspaceId": str(workspace_id), "limit": 5}
    )
    return request.body.encode(), request.headers


@contextlib.asynccontextmanager
async def stalled_uploads(port: int, count: int) -> AsyncIterator[None]:
    """`count` connections that each send a chunked /mcp head and one 1-byte chunk, then
    nothing: closed on exit."""
    writers: list[asyncio.StreamWriter] = []
    try:
        for _ in range(count):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(MCP_HEAD + b"Transfer-Encoding: chunked\r\n\r\n1\r\n{\r\n")
            await writer.drain()
            writers.append(writer)
        yield
    finally:
        for writer in writers:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


async def test_stalled_chunked_uploads_shed_nobody(
    start_app: StartApp, serve: Callable[..., ServeProcess]
) -> None:
    async with serve(BODY_TIMEOUT_SECONDS="30") as proc, aiohttp.ClientSession() as session:
        granted = await approve((await start_app(PUBLIC_URL=proc.base)).app)
        body, headers = tool_call(granted["token"], granted["workspace_id"])
        async with stalled_uploads(proc.port, STALLED):
            await asyncio.sleep(0.5)  # every stalled head is in, its chunk read
            statuses: Counter[int] = Counter()
            for _ in range(10):
                async with session.post(f"{proc.base}/mcp", data=body, headers=headers) as r:
                    await r.read()
                    statuses[r.status] += 1
                async with session.post(
                    f"{proc.base}/token", data={"grant_type": "refresh_token",
                                                "refresh_token": "nope", "client_id": "x"},
                ) as r:  # fmt: skip
                    answer = await r.json()
                    statuses[r.status] += 1
                    assert answer["error"] != "temporarily_unavailable", answer
            metrics = samples(await proc.scrape())
        assert statuses[200] == 10, statuses  # every tool call answered
        assert statuses[503] == 0, statuses
        assert metrics[("elova_mcp_shed_requests_total", (("reason", "inflight"),))] == 0


@pytest.mark.parametrize(
    "partial",
    [
        b"Content-Length: 200\r\n\r\n" + b'{"jsonrpc":"2.0","id":1,',
        b"Transfer-Encoding: chunked\r\n\r\n5\r\n" + b'{"jso\r\n',
    ],
    ids=["declared", "chunked"],
)
async def test_a_client_gone_mid_body_is_no_server_error(
    serve: Callable[..., ServeProcess], partial: bytes
) -> None:
    async with serve() as proc:
        for _ in range(3):
            _, writer = await asyncio.open_connection("127.0.0.1", proc.port)
            writer.write(MCP_HEAD + partial)
            await writer.drain()
            await asyncio.sleep(0.1)  # the head is in, the body being awaited
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        deadline = time.monotonic() + 5
        while True:
            metrics = await proc.scrape()
            gone = value(metrics, "elova_mcp_abandoned_requests_total") or 0
            if gone >= 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        assert gone == 3
        statuses = {
            dict(labels).get("status")
            for (name, labels), _ in samples(metrics).items()
            if name == "elova_mcp_http_requests_total"
        }
        assert not {s for s in statuses if s and s.startswith("5")}, statuses
        lines = proc.log_lines()
    assert not [line for line in lines if line.get("level") in ("error", "ERROR")], lines
    assert not [line for line in lines if "Traceback" in str(line)], lines


LIGHT_CLIENTS = 8
LIGHT_SECONDS = 6.0


async def test_a_fresh_replica_serves_light_load_without_shedding(
    start_app: StartApp, serve: Callable[..., ServeProcess]
) -> None:
    """Issue 42, item 8: 8 clients, each calling one after another, are far below what a
    replica can serve; none of their calls is shed (the default settings, a fresh replica)."""
    async with serve(
        LIMIT_GLOBAL_CONCURRENCY="1000",
        LIMIT_ACCOUNT_CONCURRENCY="1000",
        LIMIT_APPROVAL_PER_MINUTE="1000000",
        LOG_LEVEL="WARNING",
    ) as proc, aiohttp.ClientSession() as session:  # fmt: skip
        granted = await approve((await start_app(PUBLIC_URL=proc.base)).app)
        body, headers = tool_call(granted["token"], granted["workspace_id"])
        statuses: Counter[int] = Counter()
        deadline = time.monotonic() + LIGHT_SECONDS

        async def client() -> None:
            while time.monotonic() < deadline:
                async with session.post(f"{proc.base}/mcp", data=body, headers=headers) as r:
                    await r.read()
                    statuses[r.status] += 1

        await asyncio.gather(*(client() for _ in range(LIGHT_CLIENTS)))
        metrics = samples(await proc.scrape())
    assert set(statuses) == {200}, statuses
    assert metrics[("elova_mcp_shed_requests_total", (("reason", "inflight"),))] == 0
