"""The address of the client a request comes from.

Every per-address decision (the sign-in throttle, registration limits, the access log's
client field) asks `client_address`, so there is one answer for a request: the connection's
peer, or behind a trusted proxy (ELOVA_TRUSTED_PROXIES) the client its one forwarding
header names (`client_of`). The decisions that hold or count an address count it by
`address_block`. docs/decisions/oauth.md, "Client addresses behind proxies (issue 21)", has
the rules and why.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import TypeVar

from aiohttp import web
from multidict import MultiMapping

from service.app_keys import CLIENT_ADDRESS, CONFIG
from service.settings.proxies import TrustedProxies

UNKNOWN = "unknown"
# Entries read from the right at most: proxy chains are a few hops long, and a longer list
# is a client's invention.
MAX_HOPS = 16
_MEMO_ENTRIES = 4096
T = TypeVar("T")

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t !-~])*"'
_PAIR = rf"({_TOKEN})=({_TOKEN}|{_QUOTED})"
_PAIR_RE = re.compile(rf"[ \t]*{_PAIR}[ \t]*")
_ELEMENT_RE = re.compile(rf"[ \t]*{_PAIR}(?:[ \t]*;[ \t]*{_PAIR})*[ \t]*")
_UNESCAPE = re.compile(r"\\(.)")
_PORT = re.compile(r"\d{1,5}|_[A-Za-z0-9._-]+")


def client_address(request: web.BaseRequest) -> str:
    """The client's address as text, or "unknown" when the transport does not say."""
    if not isinstance(request, web.Request):
        return request.remote or UNKNOWN
    return address_behind(request, request.app[CONFIG].trusted_proxies)


def address_behind(request: web.BaseRequest, proxies: TrustedProxies) -> str:
    """`client_address` given the trusted proxies: for a request no app routed (aiohttp's
    answer to a head it could not parse has no app to hold the configuration)."""
    peer = request.remote or UNKNOWN
    if not proxies.networks:
        return peer
    known = request.get(CLIENT_ADDRESS)
    if known is None:
        headers = request.headers
        # A head aiohttp could not parse comes with a plain dict of what it read, or none:
        # none of it names a client, so the client is the nearest trusted hop.
        lines = headers.getall(proxies.header, ()) if isinstance(headers, MultiMapping) else ()
        known = request[CLIENT_ADDRESS] = client_of(peer, lines, proxies)
    return known


def via_trusted_proxy(request: web.BaseRequest, proxies: TrustedProxies) -> bool:
    """Whether the request's peer is a trusted proxy: its connection carries the requests
    of many clients, so per-connection decisions must be per client instead."""
    return bool(proxies.networks) and _peer(proxies, request.remote or UNKNOWN)[1]


def client_of(peer: str, lines: Sequence[str], proxies: TrustedProxies) -> str:
    """The client behind `peer`, given the lines of the header `proxies.header`.

    With ELOVA_TRUSTED_PROXIES empty (the default) it is the connection's peer address and
    no header is read. When the peer is in those networks, the one header the proxies write
    (ELOVA_TRUSTED_PROXY_HEADER: `X-Forwarded-For` by default, or RFC 7239 `Forwarded`; the
    other is never read) is walked from the right, the entry nearest the service first,
    past every address that is itself a trusted proxy; the first address that is not is the
    client. Several lines of the header are one list, in order. The walk stops, and the
    client is the nearest trusted hop (the proxy that passed it on), at the first entry that
    is not a plain address (garbage, `unknown`, an obfuscated `_identifier`, an IPv6 address
    unbracketed in `Forwarded`, a quoted value holding a comma) and after `MAX_HOPS`
    entries: nothing to the left of such an entry is believed. An entry that every hop
    trusts ends the walk at the left-most address. Addresses come out in canonical form
    (IPv4-mapped IPv6 as IPv4, IPv6 compressed, no port), so every spelling of one client is
    one key."""
    address, trusted = _peer(proxies, peer)
    if not trusted:
        return address
    entries = [entry for line in lines for entry in line.split(",")]
    for seen, entry in enumerate(reversed(entries)):
        if seen == MAX_HOPS:
            break
        hop, trusted = _entry(proxies, entry)
        if hop is None:
            break
        address = hop
        if not trusted:
            break
    return address


def peer_address(proxies: TrustedProxies, peer: str) -> tuple[str, bool]:
    """A connection's peer in canonical form, and whether it is a trusted proxy."""
    return _peer(proxies, peer)


def _peer(proxies: TrustedProxies, peer: str) -> tuple[str, bool]:
    known = proxies.peers.get(peer)
    if known is None:
        address = canonical(peer) or peer
        known = _remember(proxies.peers, peer, (address, _trusts(proxies, address)))
    return known


def _entry(proxies: TrustedProxies, entry: str) -> tuple[str | None, bool]:
    known = proxies.entries.get(entry)
    if known is None:
        if proxies.header == "forwarded":
            address = _element_for(entry)
        else:
            address = _node(entry.strip(), bare_ipv6=True)
        trusted = address is not None and _trusts(proxies, address)
        known = _remember(proxies.entries, entry, (address, trusted))
    return known


def _remember(memo: dict[str, T], key: str, value: T) -> T:
    if len(memo) >= _MEMO_ENTRIES:
        memo.clear()
    memo[key] = value
    return value


def _trusts(proxies: TrustedProxies, address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in proxies.networks if net.version == ip.version)


def canonical(text: str) -> str | None:
    """An IP address in canonical form (IPv4-mapped IPv6 as IPv4), or None."""
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None:
            return None
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
    return str(ip)


def _element_for(element: str) -> str | None:
    if _ELEMENT_RE.fullmatch(element) is None:
        return None
    # The element is well formed, so its pairs follow each other: a ";" inside a quoted
    # value is inside a pair's match, never the start of one.
    nodes = [m[2] for m in _PAIR_RE.finditer(element) if m[1].lower() == "for"]
    if len(nodes) != 1:
        return None
    node = nodes[0]
    if node.startswith('"'):
        node = _UNESCAPE.sub(r"\1", node[1:-1])
    return _node(node, bare_ipv6=False)


def _node(node: str, *, bare_ipv6: bool) -> str | None:
    """A node (RFC 7239 §6) or an X-Forwarded-For entry as a canonical address, or None."""
    if node.startswith("["):
        host, sep, rest = node[1:].partition("]")
        if not sep or (rest and not (rest[0] == ":" and _PORT.fullmatch(rest[1:]))):
            return None
        return canonical(host) if ":" in host else None
    if node.count(":") == 1:
        host, _, port = node.partition(":")
        if _PORT.fullmatch(port) is None or "." not in host:
            return None
        return canonical(host)
    if ":" in node and not bare_ipv6:
        return None  # RFC 7239: an IPv6 node is bracketed (and so quoted)
    return canonical(node)


def address_block(address: str) -> str:
    """What a per-address decision counts by: the IPv4 address (an IPv4-mapped IPv6 one
    too), or the /64 of an IPv6 one; anything that is no address, its first 64 characters.

    One host or subscriber usually holds a /64 whole, so rotating addresses inside it
    escapes nothing (issue 42). The sign-in throttle, registration limits and refusal pacing
    count by it."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address[:64]
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)
