"""The bearer test proxy itself: it must forward every header the service judges (Host,
Origin, the MCP headers) exactly, add the bearer, retry a 429 after its Retry-After, and
stream responses. The upstream here is a recording aiohttp app, so each is checked exactly;
the conformance tests exercise the same proxy against the real service."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.clients.proxy import BearerProxy


class Upstream:
    """Answers 429 (Retry-After: 1) `refuse` times, then 200; records what arrived."""

    def __init__(self, refuse: int = 0) -> None:
        self.refuse = refuse
        self.seen: list[tuple[dict[str, str], bytes, float]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((dict(request.headers), await request.read(), time.monotonic()))
        if request.path == "/sse":
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for n in range(3):
                await resp.write(f'id: {n}\ndata: {{"n": {n}}}\n\n'.encode())
            await resp.write_eof()
            return resp
        if self.refuse:
            self.refuse -= 1
            return web.json_response({"error": "account"}, status=429, headers={"Retry-After": "1"})
        return web.json_response({"ok": True}, headers={"Mcp-Session-Id": "s-1"})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    target = Upstream()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", target.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield target, f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_forwards_headers_exactly_and_adds_the_bearer(
    upstream: tuple[Upstream, str],
) -> None:
    target, url = upstream
    sent = {
        "Host": "evil.example.com",
        "Origin": "http://evil.example.com",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Mcp-Session-Id": "abc",
        "MCP-Protocol-Version": "2025-03-26",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "get_workspace",
        "Authorization": "Bearer client-supplied",
    }
    async with (
        BearerProxy(url, "tok-123") as proxy,
        aiohttp.ClientSession(skip_auto_headers=("User-Agent",)) as session,
        session.post(proxy.url + "?q=1", data=b'{"jsonrpc":"2.0"}', headers=sent) as resp,
    ):
        assert resp.status == 200
        assert resp.headers["Mcp-Session-Id"] == "s-1"
    headers, body, _ = target.seen[0]
    assert body == b'{"jsonrpc":"2.0"}'
    for name, value in sent.items():
        if name != "Authorization":
            assert headers[name] == value, name
    assert headers["Authorization"] == "Bearer tok-123"
    assert "User-Agent" not in headers  # nothing of the proxy's own is added
    assert proxy.exchanges[0].host == "evil.example.com"


async def test_retries_a_429_after_its_retry_after(upstream: tuple[Upstream, str]) -> None:
    target, url = upstream
    target.refuse = 1
    async with (
        BearerProxy(url, "tok") as proxy,
        aiohttp.ClientSession() as session,
        session.post(proxy.url, data=b"{}") as resp,
    ):
        assert resp.status == 200
        assert await resp.json() == {"ok": True}
    assert proxy.refusals == 1 and proxy.exchanges[0].statuses == [429, 200]
    (_, first, t1), (_, second, t2) = target.seen
    assert first == second == b"{}"
    assert t2 - t1 >= 0.95


async def test_streams_an_event_stream_through(upstream: tuple[Upstream, str]) -> None:
    _, url = upstream
    async with (
        BearerProxy(url, "tok") as proxy,
        aiohttp.ClientSession() as session,
        session.get(proxy.base_url + "/sse") as resp,
    ):
        assert resp.headers["Content-Type"] == "text/event-stream"
        text = await resp.text()
    assert text.count("data: ") == 3 and text.startswith("id: 0\n")
