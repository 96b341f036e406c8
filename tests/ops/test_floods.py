"""Floods against the real server: load shedding starts and stops with loop lag and at the
in-flight cap; slow heads and bodies are cut off; idle keep-alive is closed; the connection
cap holds without letting idle connections lock out good calls."""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import asyncpg
import pytest
from multidict import CIMultiDictProxy

from service.app_keys import OVERLOAD
from tests.support.serve_process import ServeProcess
from tests.support.served_app import AppClient, StartApp, scrape, value

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "floods", "version": "1"},
        },
    }
).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.01)


async def post_mcp(client: AppClient) -> tuple[int, CIMultiDictProxy[str], bytes]:
    async with client.post("/mcp", data=INITIALIZE, headers=MCP_HEADERS) as resp:
        return resp.status, resp.headers, await resp.read()


def assert_shed(status: int, headers: CIMultiDictProxy[str], body: bytes) -> None:
    assert status == 503
    assert headers["Retry-After"] == "1"
    assert headers["X-Request-Id"]
    answer = json.loads(body)
    assert answer["id"] is None and answer["error"]["code"] == -32600
    assert "overloaded" in answer["error"]["message"]


async def test_shedding_starts_and_stops_with_loop_lag(start_app: StartApp) -> None:
    # The shipped pool floor (2): with the tests' floor of 1, readiness's probe must open a
    # new connection whenever the activity flusher's prune holds the only one, and opening
    # one takes about a second on a loop this late.
    client = await start_app(SHED_LOOP_LAG_MS="50", DB_POOL_MIN="2")
    overload = client.app[OVERLOAD]
    assert (await post_mcp(client))[0] == 401  # served: the bearer check answers

    stop = asyncio.Event()

    async def late_loop() -> None:  # a CPU-bound neighbour: every turn of the loop is late
        while not stop.is_set():
            time.sleep(0.12)
            await asyncio.sleep(0)

    hog = asyncio.create_task(late_loop())
    try:
        await until(lambda: overload.lagging)
        assert_shed(*await post_mcp(client))
        async with client.get("/readyz") as ready, client.get("/livez") as live:
            assert (ready.status, live.status) == (200, 200)  # readiness does not flap
        metrics = await scrape(client)
        assert value(metrics, "elova_mcp_shedding") == 1
    finally:
        stop.set()
        await hog
    await until(lambda: not overload.lagging)
    assert (await post_mcp(client))[0] == 401
    metrics = await scrape(client)
    assert value(metrics, "elova_mcp_shedding") == 0
    assert (value(metrics, "elova_mcp_shed_requests_total", reason="loop_lag") or 0) >= 1


async def test_shedding_at_the_in_flight_cap(
    start_app: StartApp, connect: Connect, test_database: Any
) -> None:
    client = await start_app(SHED_ADMISSION="fixed", SHED_MAX_INFLIGHT="1")
    overload = client.app[OVERLOAD]
    assert client.port is not None
    # One request stays in flight: a registration waiting on a locked table (a request
    # whose body is still coming is not in flight, issue 42).
    async with held_in_flight(test_database.dsn, await connect(client.port)) as writer:
        await until(lambda: overload.inflight == 1)
        status, headers, body = await post_mcp(client)
        assert_shed(status, headers, body)
        async with client.get("/readyz") as ready:
            assert ready.status == 200
        writer.close()
    await until(lambda: overload.inflight == 0)
    assert (await post_mcp(client))[0] == 401
    metrics = await scrape(client)
    assert value(metrics, "elova_mcp_shed_requests_total", reason="inflight") == 1


# ---- the listener `serve` creates -------------------------------------------------------


@pytest.fixture
async def serve(serve_env: dict[str, str]) -> AsyncIterator[Callable[..., ServeProcess]]:
    """Start `elova-mcp serve` with extra ELOVA_* settings; stopped at the end."""
    started: list[ServeProcess] = []

    def start(**settings: str) -> ServeProcess:
        env = {**serve_env, **{f"ELOVA_{k}": v for k, v in settings.items()}}
        proc = ServeProcess(env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.__aexit__(None, None, None)


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[int], Awaitable[Stream]]]:
    """Open raw TCP connections to a port; every one is closed at the end."""
    writers: list[asyncio.StreamWriter] = []

    async def open_to(port: int) -> Stream:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writers.append(writer)
        return reader, writer

    yield open_to
    for writer in writers:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


Connect = Callable[[int], Awaitable[Stream]]

REGISTRATION = json.dumps(
    {"redirect_uris": ["http://127.0.0.1:9/callback"], "client_name": "held"}
).encode()


@contextlib.asynccontextmanager
async def held_in_flight(dsn: str, stream: Stream) -> AsyncIterator[asyncio.StreamWriter]:
    """A request in flight for as long as the block runs: a whole POST /register on
    `stream`, whose INSERT waits for a lock this holds on its table."""
    conn = await asyncpg.connect(dsn)
    try:
        lock = conn.transaction()
        await lock.start()
        await conn.execute("LOCK TABLE oauth_clients IN ACCESS EXCLUSIVE MODE")
        _, writer = stream
        writer.write(
            b"POST /register HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(REGISTRATION) + REGISTRATION
        )
        await writer.drain()
        try:
            yield writer
        finally:
            await lock.rollback()
    finally:
        await conn.close()


async def read_all(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection."""
    async with asyncio.timeout(timeout):
        return await reader.read(-1)


async def trickle_head(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
    """Send one header every 0.2 s (never a whole head) until the server answers or closes;
    what it answered. read(4096), not read(-1): a read to EOF cancelled at 0.2 s would drop
    the 408 it had already received when the close came just after."""
    for i in range(30):
        writer.write(b"X-Trickle-%d: a\r\n" % i)
        try:
            return await asyncio.wait_for(reader.read(4096), 0.2)
        except TimeoutError:
            continue
        except ConnectionError:
            break
    return b""


async def test_a_slow_head_is_cut_off(serve: Callable[..., ServeProcess], connect: Connect) -> None:
    async with serve(HEADER_TIMEOUT_SECONDS="1") as proc:
        reader, writer = await connect(proc.port)
        started = time.monotonic()
        writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = await trickle_head(reader, writer)
        elapsed = time.monotonic() - started
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert 0.9 <= elapsed < 3.0, elapsed
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_connection_cuts_total", reason="header_timeout") == 1


async def test_each_head_of_a_keep_alive_connection_gets_the_whole_deadline(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    """The second head starts 0.6 s into the first one's deadline: it still gets its own
    second, and then a 408."""
    async with serve(HEADER_TIMEOUT_SECONDS="1") as proc:
        reader, writer = await connect(proc.port)
        writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        first = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert first.startswith(b"HTTP/1.1 200 OK\r\n"), first
        length = int(first.lower().partition(b"content-length: ")[2].partition(b"\r\n")[0])
        await reader.readexactly(length)
        await asyncio.sleep(0.6)
        started = time.monotonic()
        writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = await trickle_head(reader, writer)
        elapsed = time.monotonic() - started
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert 0.9 <= elapsed < 3.0, elapsed


@pytest.mark.parametrize(
    "head",
    [
        b"Content-Length: 200\r\n\r\n",  # declared: awaited before anything else runs
        b"Transfer-Encoding: chunked\r\n\r\na\r\n",  # chunked: the stream ends at the deadline
    ],
    ids=["declared", "chunked"],
)
async def test_a_slow_body_is_cut_off(
    serve: Callable[..., ServeProcess], connect: Connect, head: bytes
) -> None:
    async with serve(BODY_TIMEOUT_SECONDS="1") as proc:
        reader, writer = await connect(proc.port)
        started = time.monotonic()
        writer.write(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Accept: application/json\r\n" + head + b'{"jsonrpc"'
        )
        answer = await read_all(reader, timeout=5)
        elapsed = time.monotonic() - started
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
        assert b'"Request Timeout: the body did not arrive in time"' in answer
        assert 0.9 <= elapsed < 3.0, elapsed
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_connection_cuts_total", reason="body_timeout") == 1


async def test_idle_keep_alive_is_closed(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with serve(KEEPALIVE_TIMEOUT_SECONDS="1") as proc:
        reader, writer = await connect(proc.port)
        writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        started = time.monotonic()
        rest = await read_all(reader, timeout=5)  # the body, then the server closes
        writer.close()
        assert rest.endswith(b'{"status": "ok"}')
        assert 0.5 <= time.monotonic() - started < 3.0


async def test_the_connection_cap_holds(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with serve(MAX_CONNECTIONS="4", HEADER_TIMEOUT_SECONDS="30") as proc:
        # Four connections in the middle of a head are busy: none of them can be closed.
        busy = [await connect(proc.port) for _ in range(4)]
        for _, writer in busy:
            writer.write(b"GET /livez HTTP/1.1\r\n")
            await writer.drain()
        await asyncio.sleep(0.3)
        reader, writer = await connect(proc.port)
        refused = await read_all(reader, timeout=5)
        writer.close()
        assert refused.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), refused
        assert b"\r\nRetry-After: 1\r\n" in refused and b"\r\nConnection: close\r\n" in refused
        assert b"too many open connections" in refused
        for _, writer in busy:
            writer.close()
        await asyncio.sleep(0.3)

        # Idle connections make room: the longest idle is closed for a new one.
        idle = [await connect(proc.port) for _ in range(4)]
        await asyncio.sleep(0.3)
        status = await asyncio.wait_for(proc.get("/livez"), 5)
        assert status.status == 200
        assert await read_all(idle[0][0], timeout=5) == b""  # closed, without a word
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_connection_cuts_total", reason="refused") == 1
    assert (value(metrics, "elova_mcp_connection_cuts_total", reason="idle_evicted") or 0) >= 1
    assert (value(metrics, "elova_mcp_open_connections") or 0) <= 4
    assert value(metrics, "elova_mcp_max_connections") == 4


@pytest.mark.timeout(60)
async def test_hundreds_of_idle_connections_do_not_slow_good_calls(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async def median_livez(proc: ServeProcess) -> float:
        times = []
        for _ in range(40):
            started = time.perf_counter()
            assert (await proc.get("/livez")).status == 200
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    async with serve() as proc:
        before = await median_livez(proc)
        for _ in range(300):
            await connect(proc.port)  # and stay silent
        await asyncio.sleep(0.5)
        during = await median_livez(proc)
        metrics = await proc.scrape()
    assert (value(metrics, "elova_mcp_open_connections") or 0) >= 300
    # Generous for a shared machine: idle connections cost a socket, not a turn of the loop.
    assert during < 3 * before + 0.005, (before, during)


@contextlib.asynccontextmanager
async def someone_served(port: int) -> AsyncIterator[None]:
    """Another client served beside the test's, every 100 ms on a connection of its own:
    pacing protects other callers, so it waits only while there are some."""

    async def served() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while True:
                writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 200 OK\r\n"), head
                await reader.readexactly(_length(head))
                await asyncio.sleep(0.1)
        finally:
            writer.close()

    task = asyncio.create_task(served())
    await asyncio.sleep(0.1)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _length(head: bytes) -> int:
    return int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])


async def _refused_in_a_row(
    stream: Stream, count: int, credential: bytes = b"Bearer not-a-token"
) -> list[float]:
    """Send `count` refused tool calls on one keep-alive connection, one after another;
    the seconds each answer took."""
    reader, writer = stream
    request = (
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json\r\nAuthorization: " + credential + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(INITIALIZE) + INITIALIZE
    )
    took = []
    for _ in range(count):
        started = time.monotonic()
        writer.write(request)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert head.startswith(b"HTTP/1.1 401 Unauthorized\r\n"), head
        await reader.readexactly(_length(head))
        took.append(time.monotonic() - started)
    return took


@pytest.mark.timeout(60)
async def test_refusals_in_a_row_are_paced_and_good_answers_end_the_run(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with (
        serve(PACE_REFUSALS_AFTER="5", LONGEST_REFUSAL_PAUSE_MS="80") as proc,
        someone_served(proc.port),
    ):
        stream = await connect(proc.port)
        took = await _refused_in_a_row(stream, 10)
        # The first five at once; then 10, 20, 40, 80, 80 ms (the longest pause).
        assert max(took[:5]) < 0.05, took
        for expected, seconds in zip((0.01, 0.02, 0.04, 0.08, 0.08), took[5:], strict=True):
            assert seconds >= expected * 0.9, took
        assert sum(took[5:]) < 1.5, took
        # Another connection with another token is not paced: the runs are the
        # connection's and the token's.
        other = await connect(proc.port)
        assert max(await _refused_in_a_row(other, 3, b"Bearer another-token")) < 0.05
        # A request that is not refused ends the run on its connection.
        reader, writer = stream
        writer.write(b"GET /livez HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 200 OK\r\n")
        await reader.readexactly(_length(head))
        fresh = b"Bearer yet-another-token"  # the first token's own run goes on
        assert max(await _refused_in_a_row(stream, 5, fresh)) < 0.05
        # So does a second of quiet (a client that honours Retry-After is never paced).
        assert (await _refused_in_a_row(stream, 1, fresh))[0] >= 0.009
        await asyncio.sleep(1.1)
        assert max(await _refused_in_a_row(stream, 5, fresh)) < 0.05
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_paced_refusals_total") == 6


async def test_with_nobody_else_to_serve_refusals_are_not_paced(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with serve() as proc:  # a replica alone with a fuzzer or a test suite
        await asyncio.sleep(1.1)  # past the start's own /livez checks
        took = await _refused_in_a_row(await connect(proc.port), 40)
        metrics = await proc.scrape()
    assert sum(took) < 2.0, took
    assert value(metrics, "elova_mcp_paced_refusals_total") == 0


async def test_pacing_can_be_turned_off(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with serve(PACE_REFUSALS_AFTER="0") as proc, someone_served(proc.port):
        took = await _refused_in_a_row(await connect(proc.port), 30)
        metrics = await proc.scrape()
    assert sum(took) < 1.5, took
    assert value(metrics, "elova_mcp_paced_refusals_total") == 0


async def test_a_paced_connection_is_the_first_closed_at_the_cap(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with serve(
        MAX_CONNECTIONS="2", PACE_REFUSALS_AFTER="1", LONGEST_REFUSAL_PAUSE_MS="5000"
    ) as proc:
        paced = await connect(proc.port)
        await _refused_in_a_row(paced, 6)  # not paced yet: nobody else was served
        assert (await proc.get("/livez")).status == 200  # now someone was, on a second one
        reader, writer = paced
        writer.write(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # 404, 7th: 320 ms
        await asyncio.sleep(0.1)
        await connect(proc.port)  # the second connection: the cap is full
        status = await asyncio.wait_for(proc.get("/livez"), 5)  # a third one gets in
        assert status.status == 200
        assert await read_all(reader, timeout=5) == b""  # closed while it waited
        metrics = await proc.scrape()
    assert (value(metrics, "elova_mcp_connection_cuts_total", reason="idle_evicted") or 0) >= 1


async def test_the_same_refused_token_is_paced_across_connections(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with (
        serve(PACE_REFUSALS_AFTER="3", LONGEST_REFUSAL_PAUSE_MS="80") as proc,
        someone_served(proc.port),
    ):
        took = []
        for _ in range(6):  # a client that opens a new connection for every request
            took += await _refused_in_a_row(await connect(proc.port), 1, b"Bearer ab.cd.ef")
        assert max(took[:3]) < 0.05, took
        for expected, seconds in zip((0.01, 0.02, 0.04), took[3:], strict=True):
            assert seconds >= expected * 0.9, took
        # Another token, or none, on a new connection: not paced.
        assert (await _refused_in_a_row(await connect(proc.port), 1, b"Bearer gh.ij.kl"))[0] < 0.05
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_paced_refusals_total") == 3


async def test_a_client_retrying_a_shed_request_at_once_is_paced_from_the_first(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with (
        serve(SHED_MAX_INFLIGHT="1", LONGEST_REFUSAL_PAUSE_MS="1000") as proc,
        someone_served(proc.port),  # /livez is never shed
        held_in_flight(proc.env["ELOVA_DATABASE_URL"], await connect(proc.port)) as _,
    ):
        await asyncio.sleep(0.3)  # one request stays in flight: its registration waits
        reader, writer = await connect(proc.port)
        took = []
        for _ in range(4):
            started = time.monotonic()
            writer.write(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json\r\nContent-Length: %d\r\n\r\n"
                % len(INITIALIZE)
                + INITIALIZE
            )
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), head
            assert b"\r\nRetry-After: 1\r\n" in head
            await reader.readexactly(_length(head))
            took.append(time.monotonic() - started)
        # 10, 20, 40, 80 ms: the replica is overloaded and the client did not wait.
        for expected, seconds in zip((0.01, 0.02, 0.04, 0.08), took, strict=True):
            assert seconds >= expected * 0.9, took
        assert sum(took) < 1.5, took
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_shed_requests_total", reason="inflight") == 4
    assert value(metrics, "elova_mcp_paced_refusals_total") == 4


async def _refused_from(stream: Stream, client: str, credential: bytes) -> float:
    """One refused tool call on `stream`, as HAProxy forwards it for `client`."""
    reader, writer = stream
    started = time.monotonic()
    writer.write(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Accept: application/json\r\nAuthorization: " + credential + b"\r\n"
        b"X-Forwarded-For: " + client.encode() + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(INITIALIZE) + INITIALIZE
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    assert head.startswith(b"HTTP/1.1 401 Unauthorized\r\n"), head
    await reader.readexactly(_length(head))
    return time.monotonic() - started


@pytest.mark.timeout(60)
async def test_behind_a_trusted_proxy_refusals_are_paced_by_client_not_by_connection(
    serve: Callable[..., ServeProcess], connect: Connect
) -> None:
    async with (
        serve(TRUSTED_PROXIES="127.0.0.0/8", PACE_REFUSALS_AFTER="3", LONGEST_REFUSAL_PAUSE_MS="80")
        as proc,
        someone_served(proc.port),
    ):  # fmt: skip
        shared = await connect(proc.port)  # the proxy's connection, carrying every client
        # Another client's refusals on the proxy's connection are not the first client's run.
        for i in range(3):
            assert await _refused_from(shared, "203.0.113.1", b"Bearer a%d" % i) < 0.05
        for i in range(2):
            assert await _refused_from(shared, "203.0.113.2", b"Bearer b%d" % i) < 0.05
        # The first client's run goes on, on the shared connection and on a new one.
        assert await _refused_from(shared, "203.0.113.1", b"Bearer a3") >= 0.009
        fresh = await connect(proc.port)
        assert await _refused_from(fresh, "203.0.113.1", b"Bearer a4") >= 0.018
        metrics = await proc.scrape()
    assert value(metrics, "elova_mcp_paced_refusals_total") == 2  # the first client's, only
