"""ConnectionGate's choices at the cap (issue 54): which connection is closed to make room,
each address's share, and a trusted proxy's connections, with stand-in connections."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import cast

import pytest

from service.server.connections import STALL_SECONDS, Connection, ConnectionGate
from service.settings.limits import Connections
from service.settings.proxies import TrustedProxies

pytestmark = pytest.mark.unit


class Stand:
    """What the gate reads of a connection: its share, its progress, and force_close."""

    def __init__(self, gate: ConnectionGate, peer: str) -> None:
        self.block = gate.block_of(peer)
        self.receiving_since: float | None = None
        self.received_bytes = 0
        self.closed = False

    def force_close(self) -> None:
        self.closed = True


def gate(cap: int, share: int, proxies: TrustedProxies | None = None) -> ConnectionGate:
    settings = Connections(max_connections=cap, max_connections_per_address=share)
    return ConnectionGate(settings, proxies=proxies)


def open_from(g: ConnectionGate, peer: str) -> Stand | None:
    conn = Stand(g, peer)
    return conn if g.admit(cast(Connection, conn)) else None


def receive(g: ConnectionGate, conn: Stand | None, ago: float, got: int) -> None:
    assert conn is not None
    conn.receiving_since = asyncio.get_running_loop().time() - ago
    conn.received_bytes = got
    g.receiving(cast(Connection, conn))


async def test_a_stalled_upload_is_closed_before_an_idle_connection() -> None:
    g = gate(cap=3, share=0)
    idle = open_from(g, "192.0.2.1")
    stalled = open_from(g, "192.0.2.2")
    fresh = open_from(g, "192.0.2.3")
    receive(g, stalled, ago=STALL_SECONDS + 1, got=100)  # a head and a few bytes, then none
    receive(g, fresh, ago=0.1, got=100)  # just began: not judged yet
    assert open_from(g, "192.0.2.4") is not None
    assert stalled is not None and stalled.closed
    assert idle is not None and not idle.closed
    # No stalled one left: the longest idle makes room.
    assert open_from(g, "192.0.2.5") is not None and idle.closed
    assert g.open_count == 3


async def test_an_upload_that_makes_progress_is_not_stalled() -> None:
    g = gate(cap=2, share=0)
    steady = open_from(g, "192.0.2.1")
    busy = open_from(g, "192.0.2.2")
    receive(g, steady, ago=STALL_SECONDS + 1, got=64 * 1024)  # a large body, arriving
    receive(g, busy, ago=0.1, got=10)
    assert open_from(g, "192.0.2.3") is None  # every connection busy and progressing
    assert steady is not None and not steady.closed


async def test_an_address_over_its_share_gives_way_to_another() -> None:
    g = gate(cap=4, share=2)
    flood = [open_from(g, "198.51.100.7") for _ in range(4)]  # the cap is nobody's yet
    assert all(flood) and g.held("198.51.100.7") == 4
    for conn in flood:
        receive(g, conn, ago=0.1, got=500)  # receiving, not (yet) stalled
    newcomer = open_from(g, "203.0.113.1")
    assert newcomer is not None  # one of the flood's made room
    assert sum(1 for c in flood if c is not None and c.closed) == 1
    assert g.held("198.51.100.7") == 3 and g.held("203.0.113.1") == 1
    # The flooding address, at its share, can only replace its own connections: none is
    # idle or stalled, so it is refused, and the newcomer's connection stays.
    assert open_from(g, "198.51.100.7") is None
    assert not newcomer.closed


async def test_an_address_at_its_share_replaces_only_its_own() -> None:
    g = gate(cap=3, share=1)
    other = open_from(g, "203.0.113.1")  # idle, the longest
    mine = open_from(g, "198.51.100.7")  # idle
    third = open_from(g, "203.0.113.2")
    assert other and mine and third
    again = open_from(g, "198.51.100.7")
    assert again is not None and mine.closed and not other.closed


async def test_ipv6_counts_per_64_and_a_trusted_proxy_has_no_share() -> None:
    proxies = TrustedProxies(networks=(ipaddress.ip_network("10.0.0.0/8"),))
    g = gate(cap=10, share=2, proxies=proxies)
    a, b = open_from(g, "2001:db8:1:2::1"), open_from(g, "2001:db8:1:2:ffff::9")
    assert a and b and a.block == b.block == "2001:db8:1:2::/64"
    assert g.held("2001:db8:1:2::/64") == 2
    proxy = [open_from(g, "10.1.2.3") for _ in range(5)]
    assert all(c is not None and c.block is None for c in proxy)
    assert g.open_count == 7
    assert Stand(gate(cap=10, share=0), "192.0.2.1").block is None  # the share is off
