"""The test proxy: a loopback reverse proxy that adds the bearer header for MCP tools that
cannot (the conformance suite, the Inspector CLI).

It forwards every request to the service unchanged — method, path, query, body and every
header, `Host` and `Origin` included, so the service's own Origin/Host check answers a
hostile request (the conformance `dns-rebinding-protection` scenario must see its 403) —
and sets `Authorization: Bearer <token>`. A 429 is retried after its `Retry-After`, as a
well-behaved harness does (docs/protocol.md: the per-account cap of 2 refuses the third of
three simultaneous requests). Responses stream back unchanged, SSE included.

Given several upstreams (replicas), it sends each request to the next one in turn, like a
round-robin load balancer with no session affinity.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

# Hop-by-hop headers (RFC 9110 §7.6.1) belong to one connection and are never forwarded;
# Content-Length is recomputed for the forwarded body.
_HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "TE",
        "Trailer", "Transfer-Encoding", "Upgrade", "Content-Length",
    )
)  # fmt: skip
MAX_RETRIES = 5
MAX_RETRY_AFTER_SECONDS = 5.0


@dataclass
class Exchange:
    """One proxied request as the test may want to check it afterwards."""

    method: str
    path: str
    host: str | None
    origin: str | None
    upstream: str
    session_id: str | None
    statuses: list[int] = field(default_factory=list)  # every upstream answer, retries included


class BearerProxy:
    """`async with BearerProxy(upstream, token) as proxy:` then point a tool at `proxy.url`."""

    def __init__(self, upstream: str | Sequence[str], token: str, *, port: int = 0) -> None:
        targets = [upstream] if isinstance(upstream, str) else list(upstream)
        self.upstreams = [u.rstrip("/") for u in targets]
        self._next = itertools.cycle(self.upstreams)
        self.token = token
        self.port = port
        self.exchanges: list[Exchange] = []
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base_url + "/mcp"

    @property
    def origin(self) -> str:
        return self.base_url

    @property
    def refusals(self) -> int:
        """How many 429s the service answered (each one retried unless retries ran out)."""
        return sum(e.statuses.count(429) for e in self.exchanges)

    async def start(self) -> BearerProxy:
        # No automatic decompression: bytes pass through exactly as the service sent them.
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=5)
        )
        app = web.Application(client_max_size=8 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> BearerProxy:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _headers(self, request: web.Request) -> list[tuple[str, str]]:
        headers = [
            (name, value)
            for name, value in request.headers.items()
            if name.lower() not in _HOP_BY_HOP and name.lower() != "authorization"
        ]
        headers.append(("Authorization", f"Bearer {self.token}"))
        return headers

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        upstream = next(self._next)
        exchange = Exchange(
            request.method, request.path_qs, request.headers.get("Host"),
            request.headers.get("Origin"), upstream, request.headers.get("Mcp-Session-Id"),
        )  # fmt: skip
        self.exchanges.append(exchange)
        headers = self._headers(request)
        target = upstream + request.raw_path
        for attempt in range(MAX_RETRIES + 1):
            answer = await self._session.request(
                request.method,
                target,
                headers=CIMultiDict(headers),
                data=body if body else None,
                allow_redirects=False,
                # Forward exactly what the client sent: add nothing of aiohttp's own.
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            )
            exchange.statuses.append(answer.status)
            if answer.status == 429 and attempt < MAX_RETRIES:
                wait = _retry_after(answer.headers.get("Retry-After"))
                await answer.read()
                answer.release()
                await asyncio.sleep(wait)
                continue
            return await self._relay(request, answer)
        raise AssertionError("unreachable")

    async def _relay(
        self, request: web.Request, upstream: aiohttp.ClientResponse
    ) -> web.StreamResponse:
        try:
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in _HOP_BY_HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                pass  # the client went away mid-stream (e.g. it cancelled an SSE read)
            return response
        finally:
            upstream.release()


def _retry_after(raw: str | None) -> float:
    try:
        seconds = float(raw) if raw is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)
