"""The main listener's connections: a cap per replica and bounded reads of slow clients.

A slow or idle client must not hold what good calls need: `ConnectionGate` caps the open
connections (closing the longest-idle one to make room), `Connection` bounds each request
head and paces refusals (service/server/refusal_pacing.py), and `listener_site` makes the
site `serve` listens on. The body deadline is service/server/body_deadline.py's; the idle
keep-alive timer is aiohttp's own. The numbers and why: docs/decisions/floods.md, "Slow and
idle clients" and "Refusal pacing".
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

from aiohttp import web
from yarl import URL

from service.app_keys import METRICS, PACING_KEY
from service.config import Config
from service.edge.client_address import (
    UNKNOWN,
    address_behind,
    address_block,
    peer_address,
    via_trusted_proxy,
)
from service.observability.metrics.app_metrics import Metrics
from service.server.refusal_pacing import SERVED_WINDOW_SECONDS, RefusalPacing, RefusalRuns
from service.settings.limits import Connections
from service.settings.proxies import TrustedProxies

_REFUSED_AT_CAP = (
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,'
    b'"message":"Service Unavailable: this replica has too many open connections;'
    b' retry shortly"}}'
)
AT_CAP_ANSWER = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: " + str(len(_REFUSED_AT_CAP)).encode() + b"\r\n\r\n" + _REFUSED_AT_CAP
)
HEAD_TIMEOUT_ANSWER = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
)


# A connection receiving a head or a body makes no progress when, past this long, it
# averaged under this many bytes a second: a head comes in a packet or two, and a body
# within the request bound at this rate would miss the body deadline anyway.
STALL_SECONDS = 2.0
STALL_BYTES_PER_SECOND = 1024
BLOCKS_REMEMBERED = 4096


class ConnectionGate:
    """The open connections of one listener: the cap, each address's share, and which to close.

    At most `max_connections` are open. At the cap a new connection makes room by closing,
    in order: a connection receiving a head or body that makes no progress (stalled, the
    oldest first); a connection not being served of an address over its share
    (`max_connections_per_address`, IPv6 per /64); the longest-idle keep-alive connection.
    A newcomer whose address holds its share already may only replace its own (stalled,
    then idle). Only when none qualifies is it refused with a precomputed 503
    (`Retry-After`, `Connection: close`). A connection waiting to answer a refusal counts as
    idle. A trusted proxy's connections carry many clients: they have no share.
    """

    def __init__(
        self,
        settings: Connections,
        metrics: Metrics | None = None,
        proxies: TrustedProxies | None = None,
    ) -> None:
        self.settings = settings
        # Asked of every answer, routed or not (a malformed head has no app to ask).
        self.proxies = proxies or TrustedProxies()
        self._metrics = metrics
        self._open: set[Connection] = set()
        self._idle: dict[Connection, None] = {}  # insertion order: idle since
        self._receiving: dict[Connection, None] = {}  # insertion order: receiving since
        self._held: dict[str, int] = {}  # connections open by address block
        self._over: dict[str, None] = {}  # the blocks holding more than their share
        self._blocks: dict[str, str | None] = {}  # block_of's answers, the latest peers
        self.runs = RefusalRuns(settings)
        # The two connections served (an answer under 400) most recently, and when: pacing
        # protects other callers, so it waits only while another connection is served.
        self._served: list[tuple[Connection | None, float]] = [(None, float("-inf"))] * 2

    def served(self, conn: Connection, now: float) -> None:
        """`conn` was just given an answer under 400."""
        latest = self._served[0]
        if latest[0] is conn:
            self._served[0] = (conn, now)
        else:
            self._served = [(conn, now), latest]

    def others_served(self, conn: Connection, now: float) -> bool:
        """Whether a connection other than `conn` was served within the last second."""
        return any(
            other is not None and other is not conn and now - at <= SERVED_WINDOW_SECONDS
            for other, at in self._served
        )

    @property
    def open_count(self) -> int:
        return len(self._open)

    def held(self, block: str) -> int:
        """How many connections the address block `block` holds open."""
        return self._held.get(block, 0)

    def block_of(self, peer: str) -> str | None:
        """The share a peer's connections count in: its address block, or None for a
        trusted proxy (and an unknown peer)."""
        if not self.settings.max_connections_per_address or peer == UNKNOWN:
            return None
        if peer in self._blocks:
            return self._blocks[peer]
        if len(self._blocks) >= BLOCKS_REMEMBERED:
            self._blocks.clear()
        address, trusted = peer_address(self.proxies, peer)
        block = self._blocks[peer] = None if trusted else address_block(address)
        return block

    def admit(self, conn: Connection) -> bool:
        """Count `conn` in (idle until it sends), making room at the cap."""
        if len(self._open) >= self.settings.max_connections and not self._make_room(conn):
            self.cut("refused")
            return False
        self._open.add(conn)
        self._idle[conn] = None
        block = conn.block
        if block is not None:
            count = self._held[block] = self._held.get(block, 0) + 1
            if count > self.settings.max_connections_per_address:
                self._over[block] = None
        self._count()
        return True

    def idle(self, conn: Connection) -> None:
        self._move(conn, self._receiving, self._idle)

    def busy(self, conn: Connection) -> None:
        self._idle.pop(conn, None)

    def receiving(self, conn: Connection) -> None:
        """`conn` began receiving a head: busy, and judged by its progress."""
        self._move(conn, self._idle, self._receiving)

    def _move(
        self, conn: Connection, leaves: dict[Connection, None], joins: dict[Connection, None]
    ) -> None:
        """`conn` out of one insertion-ordered set and, while open, last in another."""
        leaves.pop(conn, None)
        if conn in self._open:
            joins.pop(conn, None)
            joins[conn] = None

    def received(self, conn: Connection) -> None:
        """`conn`'s request is in (head and body): busy, being served."""
        self._receiving.pop(conn, None)

    def paced(self, conn: Connection) -> None:
        """`conn` waits to answer a refusal: counted, and idle until it writes."""
        if self._metrics is not None:
            self._metrics.refusal_paced()
        self.idle(conn)

    def closed(self, conn: Connection) -> None:
        self._idle.pop(conn, None)
        self._receiving.pop(conn, None)
        if conn in self._open:
            self._open.discard(conn)
            block = conn.block
            if block is not None:
                count = self._held[block] = self._held[block] - 1
                if count <= self.settings.max_connections_per_address:
                    self._over.pop(block, None)
                if not count:
                    del self._held[block]
            self._count()

    def _make_room(self, newcomer: Connection) -> bool:
        block = newcomer.block
        if block is not None and self._held.get(block, 0) >= (
            self.settings.max_connections_per_address
        ):  # at its share: only its own connections make room for it
            stalled = self._stalled(block)
            if stalled is not None:
                return self._evict(stalled, "stalled_evicted")
            oldest = next((c for c in self._idle if c.block == block), None)
            return oldest is not None and self._evict(oldest, "idle_evicted")
        stalled = self._stalled(None)
        if stalled is not None:
            return self._evict(stalled, "stalled_evicted")
        over = self._over_share()
        if over is not None:
            return self._evict(over, "share_evicted")
        oldest = next(iter(self._idle), None)
        return oldest is not None and self._evict(oldest, "idle_evicted")

    def _stalled(self, block: str | None) -> Connection | None:
        """The oldest receiving connection (of `block`, if given) making no progress."""
        now = asyncio.get_running_loop().time()
        for conn in self._receiving:
            since = conn.receiving_since
            if since is None or now - since < STALL_SECONDS:
                return None  # the rest began later
            if (block is None or conn.block == block) and conn.received_bytes < (
                now - since
            ) * STALL_BYTES_PER_SECOND:
                return conn
        return None

    def _over_share(self) -> Connection | None:
        """A connection of an address over its share that is not being served: its
        longest idle, else its oldest receiving."""
        if not self._over:
            return None
        over = self._over
        return next((c for c in self._idle if c.block in over), None) or next(
            (c for c in self._receiving if c.block in over), None
        )

    def _evict(self, conn: Connection, reason: str) -> bool:
        self.closed(conn)  # counted out now; its transport closes asynchronously
        conn.force_close()
        self.cut(reason)
        return True

    def cut(self, reason: str) -> None:
        """Count one connection closed or refused by a guard."""
        if self._metrics is not None:
            self._metrics.connection_cut(reason)

    def _count(self) -> None:
        if self._metrics is not None:
            self._metrics.set_open_connections(len(self._open))


class Connection(web.RequestHandler):
    """aiohttp's HTTP/1 connection, counted by a gate and with a deadline on each head.

    A request head must arrive within `header_timeout_seconds` of its first byte, or the
    connection gets a 408 and is closed. An idle keep-alive connection is closed after
    `keepalive_timeout_seconds` (aiohttp's own keep-alive timer, which also runs from the
    moment a connection opens). Refusals are paced: refusal_pacing.py decides how long an
    answer waits, by the connection's run, the run of its `PACING_KEY` and, behind a trusted
    proxy, its client's run. Pacing protects other callers, so it waits only while another
    connection was served within the last second; the pause holds no slot, pool connection
    or in-flight count.
    """

    def __init__(self, manager: web.Server, gate: ConnectionGate, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._gate = gate
        # The head deadline: when the head in progress began (None between heads), and one
        # timer at a time, re-armed when it fires early (arming and cancelling one a request
        # showed in the cost of every answer, refusals included).
        self._head_since: float | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._serving = False
        self._refused = False
        self._pacing = RefusalPacing(gate.settings)
        # When the last bytes came in (time.monotonic): once a request is complete, when it
        # was complete. Load shedding's in-flight limit measures a request's latency from
        # there, so the wait for the event loop before the app starts it is counted, and a
        # client that trickles its head or body is not (its time starts at its last byte).
        self.received_at = time.monotonic()
        # The share it counts in (ConnectionGate.block_of), and while a head or body comes
        # in, since when (loop time) and how many bytes: stalled ones are closed at the cap.
        self.block: str | None = None
        self.receiving_since: float | None = None
        self.received_bytes = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self.block = self._gate.block_of(str(peer[0]) if isinstance(peer, tuple) else UNKNOWN)
        if not self._gate.admit(self):
            self._refused = True
            answer = cast(asyncio.Transport, transport)  # uvloop's is not an asyncio class
            answer.write(AT_CAP_ANSWER)
            answer.close()
            return
        super().connection_made(transport)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._gate.closed(self)
        self._stop_head_timer()
        if not self._refused:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        self.received_at = time.monotonic()
        if data and not self._serving and self._head_since is None:
            loop = asyncio.get_running_loop()
            self._head_since = self.receiving_since = loop.time()
            self.received_bytes = 0
            self._gate.receiving(self)
            if self._head_timer is None:
                self._head_timer = loop.call_later(
                    self._gate.settings.header_timeout_seconds, self._head_too_slow
                )
        if self.receiving_since is not None:
            self.received_bytes += len(data)
        super().data_received(data)

    def request_started(self) -> None:
        """The app is handling a request of this connection: its head is complete (its body
        may still be coming in)."""
        self._serving = True
        self._head_since = None

    def request_received(self) -> None:
        """The request's body is in too (or it has none): no longer judged by its progress."""
        self.receiving_since = None
        self._gate.received(self)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        if not self._gate.settings.pace_refusals_after:
            try:  # pacing off: no run of refusals to keep, no pause to decide
                return await super().finish_response(request, resp, start_time)
            finally:
                self._finished()
        loop = asyncio.get_running_loop()
        status, now = resp.status, loop.time()
        # Behind a trusted proxy one connection carries many clients' requests: the run of
        # refusals is the client's (by its address), not the connection's.
        proxies = self._gate.proxies
        client = (
            ("client", address_block(address_behind(request, proxies)))
            if via_trusted_proxy(request, proxies)
            else None
        )
        if client is None:
            pause = self._pacing.pause(status, now)
        else:
            pause = self._gate.runs.pause(client, status, now)
        key = request.get(PACING_KEY)
        if key is not None:
            pause = max(pause, self._gate.runs.pause(key, status, now))
        if pause and self._gate.others_served(self, now):
            self._gate.paced(self)  # idle while it waits: the first closed at the cap
            await asyncio.sleep(pause)
            self._gate.busy(self)
        try:
            return await super().finish_response(request, resp, start_time)
        finally:
            now = loop.time()
            if client is None:
                self._pacing.answered(status, now)
            else:
                self._gate.runs.answered(client, status, now)
            if status < 400:
                self._gate.served(self, now)
            if key is not None:
                self._gate.runs.answered(key, status, now)
            self._finished()

    def _finished(self) -> None:
        """An answer was written: the connection waits for its next head, idle."""
        self._serving = False
        self._head_since = self.receiving_since = None
        if self.transport is not None:
            self._gate.idle(self)

    def _head_too_slow(self) -> None:
        self._head_timer = None
        since = self._head_since
        if self._serving or self.transport is None or since is None:
            return
        loop = asyncio.get_running_loop()
        left = since + self._gate.settings.header_timeout_seconds - loop.time()
        if left > 0:  # armed for an earlier head: this one has time left
            self._head_timer = loop.call_later(left, self._head_too_slow)
            return
        self._gate.cut("header_timeout")
        self.transport.write(HEAD_TIMEOUT_ANSWER)
        self.force_close()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None


class ListenerSite(web.BaseSite):
    """A TCP site whose connections are `Connection`s sharing one gate."""

    __slots__ = ("_host", "_port", "_gate")

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: ConnectionGate) -> None:
        super().__init__(runner)
        self._host, self._port, self._gate = host, port, gate

    @property
    def name(self) -> str:
        return str(URL.build(scheme="http", host=self._host, port=self._port))

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        loop = asyncio.get_running_loop()
        settings = self._gate.settings

        def connection() -> Connection:
            return Connection(
                server,
                self._gate,
                loop=loop,
                access_log=None,  # service/server/access_log.py writes the access line
                keepalive_timeout=settings.keepalive_timeout_seconds,
                lingering_time=settings.body_timeout_seconds,
            )

        self._server = await loop.create_server(
            connection, self._host, self._port, backlog=self._backlog
        )


def listener_site(runner: web.AppRunner, cfg: Config) -> ListenerSite:
    """The main listener's site: the connection cap and the slow-client guards."""
    gate = ConnectionGate(cfg.connections, runner.app.get(METRICS), cfg.trusted_proxies)
    return ListenerSite(runner, cfg.host, cfg.port, gate)
