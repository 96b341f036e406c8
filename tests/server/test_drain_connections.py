"""Keep-alive connections during the drain (service/server/listener.py), on the real listener
site `serve` uses, over raw sockets so every byte and every close is seen:

- a request answered during the drain window says `Connection: close` and its connection
  closes after the answer;
- a keep-alive connection left idle is closed by the server once the listener closes (not
  before, while a balancer may still send on it), while
  a request still in flight on another connection finishes;
- that in-flight request's answer says `Connection: close` and its connection closes too;
- new connections are refused once the listener closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web

from service.app import create_app
from service.config import Config
from service.server import connections
from service.server.listener import drain
from tests.support.server import free_port

DRAIN_SECONDS = 0.6


async def _request(writer: asyncio.StreamWriter, path: str) -> None:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if ":" in line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    await reader.readexactly(int(headers.get("content-length", "0")))
    return int(status_line.split()[1]), headers


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 10) == b""


async def test_drain_closes_keep_alive_connections_gracefully(
    make_config: Callable[..., Config],
) -> None:
    port = free_port()
    cfg = make_config(METRICS_PORT="0", PORT=str(port))
    app = create_app(cfg)
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"finished": True})

    app.router.add_get("/test-slow", slow)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=5)
    await runner.setup()
    await connections.listener_site(runner, cfg).start()
    draining: asyncio.Task[None] | None = None
    try:
        idle = await asyncio.open_connection("127.0.0.1", port)
        busy = await asyncio.open_connection("127.0.0.1", port)
        late = await asyncio.open_connection("127.0.0.1", port)
        for reader, writer in (idle, late):
            await _request(writer, "/livez")
            status, headers = await _answer(reader)
            assert status == 200 and headers.get("connection", "") != "close"
        await _request(busy[1], "/test-slow")
        await asyncio.sleep(0.1)

        loop = asyncio.get_running_loop()
        drain_started = loop.time()
        draining = asyncio.create_task(drain(app, runner, DRAIN_SECONDS, asyncio.Event()))
        await asyncio.sleep(0.1)
        # Within the window: still served, and told to reconnect (elsewhere).
        await _request(late[1], "/livez")
        status, headers = await _answer(late[0])
        assert status == 200 and headers["connection"] == "close"
        assert await _closed_by_server(late[0])
        # Once the window is over (not before: a balancer may still send on it) the idle
        # connection is closed; the slow request still runs.
        assert await _closed_by_server(idle[0])
        assert loop.time() - drain_started >= DRAIN_SECONDS - 0.05
        assert not draining.done()
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        release.set()
        status, headers = await _answer(busy[0])
        assert status == 200 and headers["connection"] == "close"
        assert await _closed_by_server(busy[0])
        await asyncio.wait_for(draining, 10)
        for _, writer in (idle, busy, late):
            writer.close()
    finally:
        release.set()
        if draining is None:
            await runner.cleanup()
        else:
            await asyncio.wait_for(asyncio.shield(draining), 10)
