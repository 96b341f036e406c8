"""The address of the client a request comes from.

Every per-address decision (the sign-in throttle, registration limits, the access log's
client field) asks `client_address`, so there is one answer for a request.

With ELOVA_TRUSTED_PROXIES empty (the default) it is the connection's peer address and no
header is read. When the peer is in those networks, the one header the proxies write
(ELOVA_TRUSTED_PROXY_HEADER: `X-Forwarded-For` by default, or RFC 7239 `Forwarded`; the
other is never read) is walked from the right, the entry nearest the service first, past
every address that is itself a trusted proxy; the first address that is not is the client.
Several lines of the header are one list, in order. The walk stops, and the client is the
nearest trusted hop (the proxy that passed it on), at the first entry that is not a plain
address (garbage, `unknown`, an obfuscated `_identifier`, an IPv6 address unbracketed in
`Forwarded`, a quoted value holding a comma) and after `MAX_HOPS` entries: nothing to the
left of such an entry is believed. An entry that every hop trusts ends the walk at the
left-most address. Addresses come out in canonical form (IPv4-mapped IPv6 as IPv4, IPv6
compressed, no port), so every spelling of one client is one key. docs/decisions/oauth.md
has the rules and why.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence

from aiohttp import web

from service.config import TrustedProxies
from service.keys import CLIENT_ADDRESS, CONFIG

UNKNOWN = "unknown"
# Entries read from the right at most: proxy chains are a few hops long, and a longer list
# is a client's invention.
MAX_HOPS = 16
_MEMO_ENTRIES = 4096

_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_QUOTED = r'"(?:[\t !#-\[\]-~]|\\[\t !-~])*"'
_PAIR = rf"({_TOKEN})=({_TOKEN}|{_QUOTED})"
_PAIR_RE = re.compile(rf"[ \t]*{_PAIR}[ \t]*")
_ELEMENT_RE = re.compile(rf"[ \t]*{_PAIR}(?:[ \t]*;[ \t]*{_PAIR})*[ \t]*")
_UNESCAPE = re.compile(r"\\(.)")
_PORT = re.compile(r"\d{1,5}|_[A-Za-z0-9._-]+")


def client_address(request: web.BaseRequest) -> str:
    """The client's address as text, or "unknown" when the transport does not say."""
    peer = request.remote or UNKNOWN
    if not isinstance(request, web.Request):
        return peer
    proxies = request.app[CONFIG].trusted_proxies
    if not proxies.networks:
        return peer
    known = request.get(CLIENT_ADDRESS)
    if known is None:
        lines = request.headers.getall(proxies.header, ())
        hops = forwarded_hops(lines) if proxies.header == "forwarded" else forwarded_for_hops(lines)
        known = request[CLIENT_ADDRESS] = client_of(peer, hops, proxies)
    return known


def via_trusted_proxy(request: web.BaseRequest) -> bool:
    """Whether the request's peer is a trusted proxy: its connection carries the requests
    of many clients, so per-connection decisions must be per client instead."""
    if not isinstance(request, web.Request):
        return False
    proxies = request.app[CONFIG].trusted_proxies
    if not proxies.networks:
        return False
    peer = request.remote or UNKNOWN
    return trusts(proxies, canonical(peer) or peer)


def client_of(peer: str, hops: Sequence[str | None], proxies: TrustedProxies) -> str:
    """The client behind `peer`, given the header's entries left to right (None: not an
    address)."""
    peer = canonical(peer) or peer
    if not trusts(proxies, peer):
        return peer
    nearest = peer
    for seen, hop in enumerate(reversed(hops)):
        if hop is None or seen == MAX_HOPS:
            return nearest
        if not trusts(proxies, hop):
            return hop
        nearest = hop
    return nearest


def trusts(proxies: TrustedProxies, address: str) -> bool:
    """Whether `address` (canonical text) is in the trusted proxies' networks."""
    memo = proxies.memo
    known = memo.get(address)
    if known is None:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            known = False
        else:
            known = any(ip in net for net in proxies.networks if net.version == ip.version)
        if len(memo) >= _MEMO_ENTRIES:
            memo.clear()
        memo[address] = known
    return known


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


def forwarded_for_hops(lines: Sequence[str]) -> list[str | None]:
    """The entries of X-Forwarded-For lines: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
    `[2001:db8::1]`, `[2001:db8::1]:4711`; None for anything else."""
    return [_node(entry.strip(), bare_ipv6=True) for line in lines for entry in line.split(",")]


def forwarded_hops(lines: Sequence[str]) -> list[str | None]:
    """The `for=` node of each element of RFC 7239 Forwarded lines; None for an element
    that is not well formed, has no `for=` (or two), or whose node is not an address."""
    return [_element_for(element) for line in lines for element in line.split(",")]


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
