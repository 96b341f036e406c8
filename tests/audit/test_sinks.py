"""Where audit lines go, and that none is lost: a unix socket sink read by a collector, a
burst of concurrent calls through a slow sink (back-pressure: calls wait, lines are not
dropped), a sink that is down (calls refused 503 past the bound; queued lines written once
it is back), and stdout of a real `elova-mcp serve` beside the request log."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import AUDIT, DB_POOL, METRICS, TOKENS
from service.audit.sinks import Sink
from service.config import Config
from tests.audit.reading import audit_lines
from tests.auth.flow import BROWSER, hidden
from tests.support.approvals import granted, seed_member
from tests.support.mcp_wire import tool_call
from tests.support.server import ServeProcesses

CALLS = 40
GENEROUS_LIMITS = {
    "LIMIT_GLOBAL_CONCURRENCY": "100",
    "LIMIT_ACCOUNT_CONCURRENCY": "100",
    "LIMIT_APPROVAL_PER_MINUTE": "10000",
}


class Collector:
    """A local collector on a unix stream socket: keeps every byte it is sent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.received = bytearray()
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._connections.add(writer)
            while chunk := await reader.read(65536):
                self.received += chunk
            writer.close()

        self._server = await asyncio.start_unix_server(take, path=str(self.path))

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            # Since Python 3.12 wait_closed waits for every connection: drop the sink's.
            for writer in self._connections:
                writer.transport.abort()
            await self._server.wait_closed()

    async def count(self, lines: int) -> int:
        """The lines received once `lines` have arrived (or two seconds have passed): a
        line the sink has written may still be in the socket, not yet read."""
        for _ in range(40):
            if len(self.lines()) >= lines:
                break
            await asyncio.sleep(0.05)
        return len(self.lines())

    def lines(self) -> list[dict[str, Any]]:
        return audit_lines(self.received.decode())


class SlowSink:
    """The configured sink, 30 ms slower a write: a collector that cannot keep up."""

    def __init__(self, inner: Sink) -> None:
        self.inner = inner

    async def write(self, lines: bytes) -> None:
        await asyncio.sleep(0.03)
        await self.inner.write(lines)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
def socket_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.sock"


@pytest.fixture
async def collector(socket_path: Path) -> AsyncIterator[Collector]:
    found = Collector(socket_path)
    yield found
    await found.stop()


async def _app(
    aiohttp_client: Any, make_config: Callable[..., Config], **settings: str
) -> tuple[TestClient[web.Request, web.Application], str]:
    client: TestClient[web.Request, web.Application] = await aiohttp_client(
        create_app(make_config(**GENEROUS_LIMITS, **settings))
    )
    app = client.app
    who = await seed_member(app[DB_POOL], workspaces=1)
    _, issued = await granted(app[DB_POOL], app[TOKENS], who)
    return client, issued.access_token


async def _burst(client: TestClient[web.Request, web.Application], token: str) -> list[int]:
    async def one(i: int) -> int:
        body, headers = tool_call("get_many_workspaces", {"limit": 1 + i % 5}, token=token)
        async with client.post("/mcp", json=body, headers=headers) as resp:
            await resp.read()
            return resp.status

    return list(await asyncio.gather(*(one(i) for i in range(CALLS))))


def _sample(client: TestClient[web.Request, web.Application], name: str) -> float:
    return client.app[METRICS].registry.get_sample_value(f"elova_mcp_audit_{name}") or 0.0


async def test_burst_through_a_slow_unix_socket_sink_loses_no_line(
    aiohttp_client: Any, make_config: Callable[..., Config], socket_path: Path,
    collector: Collector,
) -> None:  # fmt: skip
    await collector.start()
    client, token = await _app(
        aiohttp_client, make_config,
        AUDIT_SINK=f"unix:{socket_path}", AUDIT_QUEUE_LINES="4", AUDIT_WAIT_SECONDS="30",
    )  # fmt: skip
    writer = client.app[AUDIT]
    writer.sink = SlowSink(writer.sink)
    statuses = await _burst(client, token)
    assert statuses == [200] * CALLS
    await writer.flushed()
    await client.close()  # the app's shutdown: the writer drained, the socket closed
    for _ in range(50):
        if len(collector.lines()) >= CALLS:
            break
        await asyncio.sleep(0.05)
    lines = collector.lines()
    assert len(lines) == CALLS
    assert {line["type"] for line in lines} == {"tool.call"}
    assert len({line["context"]["request_id"] for line in lines}) == CALLS
    assert _sample(client, "queue_waits_total") > 0  # calls were held, lines not dropped
    assert _sample(client, "lines_written_total") == CALLS
    assert _sample(client, "refused_total") == 0


async def test_sink_down_refuses_past_the_bound_and_writes_the_queue_when_back(
    aiohttp_client: Any, make_config: Callable[..., Config], socket_path: Path,
    collector: Collector, caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    client, token = await _app(
        aiohttp_client, make_config,
        AUDIT_SINK=f"unix:{socket_path}", AUDIT_QUEUE_LINES="2", AUDIT_WAIT_SECONDS="0.5",
    )  # fmt: skip
    statuses = await _burst(client, token)  # no collector listening yet
    refused = statuses.count(503)
    assert refused > 0 and set(statuses) == {200, 503}, statuses
    body, headers = tool_call("get_many_workspaces", {}, token=token)
    async with client.post("/mcp", json=body, headers=headers) as resp:
        answer = await resp.json()
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
    assert answer["error"]["message"].startswith("Service Unavailable: the audit trail")
    assert _sample(client, "sink_errors_total") > 0
    assert _sample(client, "refused_total") == refused + 1
    # An OAuth request whose line finds no room: the OAuth JSON 503, with Retry-After.
    metadata = {"redirect_uris": ["http://127.0.0.1:9/callback"], "client_name": "audit-full"}
    async with client.post("/register", json=metadata) as resp:
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        assert (await resp.json())["error"] == "temporarily_unavailable"
    assert _sample(client, "refused_total") == refused + 2
    # A browser's sign-in whose line finds no room: the busy page, not the crash page, and
    # no traceback in the log (a sink outage is expected).
    page = await client.get("/signin", headers=BROWSER)
    fields = dict(hidden(await page.text()))
    caplog.clear()
    form = {**fields, "email": "nobody@example.com", "password": "not-the-password"}
    async with client.post("/signin", data=form, headers=BROWSER) as resp:
        assert resp.status == 503 and resp.headers["Retry-After"] == "1"
        assert resp.content_type == "text/html" and "Elova is busy" in await resp.text()
    assert "unhandled error" not in caplog.text
    assert _sample(client, "refused_total") == refused + 3

    await collector.start()  # the collector is back: what was queued is written
    await asyncio.wait_for(client.app[AUDIT].flushed(), 10)
    answered = statuses.count(200)
    assert await collector.count(answered) == answered  # every answered call has its line
    # and the app works again
    body, headers = tool_call("get_many_workspaces", {}, token=token)
    async with client.post("/mcp", json=body, headers=headers) as resp:
        assert resp.status == 200
    await asyncio.wait_for(client.app[AUDIT].flushed(), 10)
    assert await collector.count(answered + 1) == answered + 1


@pytest.mark.timeout(60)
async def test_stdout_of_a_serve_process_carries_the_audit_lines(test_database: Any) -> None:
    pool = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=1)
    try:
        who = await seed_member(pool, workspaces=1)
    finally:
        await pool.close()
    with ServeProcesses(test_database.dsn, env={"ELOVA_LOG_LEVEL": "INFO"}) as server:
        issued = await server.approve(account=who.email, workspaces=who.workspaces)
        calls = [
            ("get_workspace", {"workspaceId": str(who.workspaces[0])}, issued.access_token),
            ("get_workspace", {"workspaceId": str(uuid.uuid4())}, issued.access_token),
            ("get_workspace", {"workspaceId": str(who.workspaces[0])}, "bad-token"),
        ]
        async with aiohttp.ClientSession() as http:
            for name, arguments, token in calls:
                body, headers = tool_call(name, arguments, token=token)
                async with http.post(server.mcp_url, json=body, headers=headers) as resp:
                    await resp.read()
        for _ in range(100):
            output = server.output(0)
            if len(audit_lines(output)) >= len(calls):
                break
            await asyncio.sleep(0.05)
    lines = audit_lines(output)
    assert [line["outcome"]["http_status"] for line in lines] == [200, 200, 401]
    assert [line["outcome"].get("tool_error") for line in lines] == [None, "NOT_FOUND", None]
    # beside the request log, on the same stdout
    logged = [json.loads(raw) for raw in output.splitlines() if raw.startswith("{")]
    access = [line for line in logged if line.get("event") == "http_request"]
    assert len([a for a in access if a["path"] == "/mcp"]) == len(calls)
    assert issued.access_token not in output and issued.refresh_token not in output


async def test_a_call_the_store_could_not_answer_has_its_503_line(
    aiohttp_client: Any, make_config: Callable[..., Config], tmp_path: Path
) -> None:
    path = tmp_path / "audit.jsonl"
    client, token = await _app(aiohttp_client, make_config, AUDIT_SINK=f"file:{path}")
    await client.app[DB_POOL].close()  # PostgreSQL out of reach for this replica
    body, headers = tool_call("get_many_workspaces", {"limit": 2}, token=token)
    async with client.post("/mcp", json=body, headers=headers) as resp:
        assert resp.status == 503
    await client.app[AUDIT].flushed()
    (line,) = audit_lines(path.read_text())
    assert line["outcome"] == {
        "result": "failure", "http_status": 503, "jsonrpc_code": -32600
    }  # fmt: skip
    assert line["target"]["tool"] == "get_many_workspaces"
    assert line["arguments"]["clear"] == {"limit": 2}


async def test_a_flood_of_refusals_leaves_room_for_real_calls(
    aiohttp_client: Any, make_config: Callable[..., Config], socket_path: Path,
    collector: Collector,
) -> None:  # fmt: skip
    """The sink is down: 40 unauthenticated calls at once fill only the refusals' half of the
    queue (those past it are refused 503 after their wait), and a real call still finds room
    and is answered, its line written once the collector is back."""
    client, token = await _app(
        aiohttp_client, make_config,
        AUDIT_SINK=f"unix:{socket_path}", AUDIT_QUEUE_LINES="10", AUDIT_WAIT_SECONDS="0.3",
    )  # fmt: skip
    flood = await _burst(client, "not-a-token")
    assert set(flood) == {401, 503} and flood.count(401) <= 5 + 1, flood
    body, headers = tool_call("get_many_workspaces", {}, token=token)
    async with client.post("/mcp", json=body, headers=headers) as resp:
        assert resp.status == 200  # before: the queue was full of 401 lines, so 503
    await collector.start()
    await asyncio.wait_for(client.app[AUDIT].flushed(), 10)
    await collector.count(flood.count(401) + 1)
    lines = collector.lines()
    assert [line["outcome"]["http_status"] for line in lines].count(200) == 1
    assert len(lines) == flood.count(401) + 1
