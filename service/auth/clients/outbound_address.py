"""Where an outbound fetch may connect: the host forms it accepts and the addresses it may
reach. The metadata-document fetch (document_fetch.py) asks these two questions in this
order, and nothing else decides them:

1. the form (`parse_authority`, `parse_host`), judged on the host exactly as written, before
   any DNS lookup or socket;
2. the address (`public_unicast`): EVERY address a host has must be public unicast.

Each form and address, decided and why: the table in docs/decisions/oauth.md, "Where the
metadata-document fetch connects", which mirrors this module.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

Address = IPv4Address | IPv6Address

MAX_HOST_LENGTH = 253
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_IPV6_LITERAL = re.compile(r"\[([0-9A-Fa-f:.]+)\]")
_AUTHORITY = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::([0-9]{1,5}))?")

# Special-purpose blocks no fetch may reach (RFC 6890 and the IANA special-purpose
# registries), with why. IPv6 outside 2000::/3 is refused before this table is read.
NON_PUBLIC: tuple[tuple[IPv4Network | IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(net), why)
    for net, why in (
        ("0.0.0.0/8", "this network; 0.0.0.0 reaches the local host"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local (cloud metadata services live here)"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast (deprecated)"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved, and 255.255.255.255 broadcast"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("64:ff9b:1::/48", "local-use NAT64 (its IPv4 position is the operator's choice)"),
        ("100::/64", "discard-only"),
        ("2001::/23", "IETF protocol assignments (Teredo, 2001::/32, is decoded first)"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment-routing SIDs"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated)"),
        ("ff00::/8", "multicast"),
    )
)
_GLOBAL_UNICAST = IPv6Network("2000::/3")
_NAT64 = IPv6Network("64:ff9b::/96")
_SIIT = IPv6Network("::ffff:0:0:0/96")
_COMPATIBLE = IPv6Network("::/96")
_ISATAP_ID = 0x00005EFE  # the interface id's upper half (the u bit may be set)
# Transition forms whose IPv4 address is the whole story: the IPv6 prefix is only a way
# to reach it, so the verdict is the IPv4 address's.
_DECODED = ("IPv4-mapped", "SIIT", "NAT64", "IPv4-compatible", "6to4", "Teredo")


@dataclass(frozen=True, slots=True)
class Host:
    """A host in an accepted form: `name` is what the HTTP stack will send and verify TLS
    against (lowercase); `address` is set when the host is an IP literal."""

    name: str
    address: Address | None = None


def parse_authority(authority: str) -> tuple[Host, int | None] | None:
    """`host[:port]` as written in a URL (no user information), or None when its form is
    refused. The port, when written, is 1–65535."""
    found = _AUTHORITY.fullmatch(authority)
    if found is None:
        return None
    host = parse_host(found.group(1))
    port = int(found.group(2)) if found.group(2) is not None else None
    if host is None or (port is not None and not 0 < port < 65536):
        return None
    return host, port


def parse_host(text: str) -> Host | None:
    """`text` (a URL's host as written; IPv6 in brackets) in an accepted form, or None.

    Accepted: plain ASCII LDH labels (letters, digits, hyphen; labels of 1–63 characters,
    not starting or ending with a hyphen; at most 253 characters; no trailing dot; the last
    label starting with a letter, as top-level domains do), a canonical dotted-quad IPv4
    address, or a bracketed IPv6 address without a zone. Everything else is refused, because
    some HTTP stack or resolver would turn it into an address the check did not see: Unicode
    digits and dots (IDNA maps them to ASCII), percent-encoding, backslashes, and the legacy
    IPv4 spellings `inet_aton` accepts (`0177.0.0.1`, `0x7f.1`, `2130706433`, `127.1`). A
    Unicode host name is written in its A-label (punycode) form."""
    if not text.isascii() or not 0 < len(text) <= MAX_HOST_LENGTH + 2:
        return None
    if text.startswith("["):
        return _ipv6_literal(text)
    labels = text.split(".")
    if not labels[-1][:1].isalpha():
        # An address, or a name that resolvers would read as one (127.1, 0x7f.1, 2130706433).
        return _ipv4_literal(text)
    if len(text) > MAX_HOST_LENGTH or not all(_LABEL.fullmatch(label) for label in labels):
        return None
    return Host(text.lower())


def _ipv4_literal(text: str) -> Host | None:
    try:
        address = IPv4Address(text)  # refuses leading zeros and short forms
    except ValueError:
        return None
    return Host(text, address) if str(address) == text else None


def _ipv6_literal(text: str) -> Host | None:
    found = _IPV6_LITERAL.fullmatch(text)  # no zone (%eth0): a zone names a local link
    if found is None:
        return None
    try:
        address = IPv6Address(found.group(1))
    except ValueError:
        return None
    return Host(ipv6_text(address), address)


def ipv6_text(address: IPv6Address) -> str:
    """`address` in RFC 5952's compressed hex form, the same on every Python: 3.13 spells an
    IPv4-mapped address `::ffff:127.0.0.1` where 3.11 and 3.12 spell it `::ffff:7f00:1`, and
    a stored redirect URI or a compared host must not change with the replica's Python."""
    if address.ipv4_mapped is None:
        return address.compressed
    low32 = int(address) & 0xFFFFFFFF
    return f"::ffff:{low32 >> 16:x}:{low32 & 0xFFFF:x}"


def embedded_ipv4(address: IPv6Address) -> tuple[str, tuple[IPv4Address, ...]] | None:
    """The transition form of `address` and the IPv4 address(es) it carries, or None."""
    low32 = IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return "IPv4-mapped", (address.ipv4_mapped,)
    if address in _SIIT:
        return "SIIT", (low32,)
    if address in _NAT64:
        return "NAT64", (low32,)
    if address in _COMPATIBLE:
        return "IPv4-compatible", (low32,)
    if address.sixtofour is not None:
        return "6to4", (address.sixtofour,)
    if address.teredo is not None:
        server, client = address.teredo  # the client's address is un-XORed here
        return "Teredo", (server, client)
    if (int(address) >> 32) & 0xFDFFFFFF == _ISATAP_ID:
        return "ISATAP", (low32,)
    return None


def public_unicast(address: Address) -> bool:
    """Whether a fetch may connect to `address`. An IPv6 form that carries an IPv4 address
    (IPv4-mapped, IPv4-compatible, SIIT, NAT64, 6to4, Teredo, ISATAP) is judged by the IPv4
    address inside, since that is where the packets end up; a bare prefix carries 0.0.0.0 or
    another non-public address and is refused. Other IPv6 addresses must be global unicast
    (2000::/3). The blocks of `NON_PUBLIC` are refused, and Python's `is_global` is asked as
    a second opinion (it can only refuse more)."""
    if isinstance(address, IPv6Address):
        if address.scope_id is not None:
            return False
        carried = embedded_ipv4(address)
        if carried is not None:
            form, inside = carried
            if not all(_public_ipv4(ip) for ip in inside):
                return False
            if form in _DECODED:
                return True
        return address in _GLOBAL_UNICAST and _outside_table(address) and address.is_global
    return _public_ipv4(address)


def _public_ipv4(address: IPv4Address) -> bool:
    return _outside_table(address) and address.is_global


def _outside_table(address: Address) -> bool:
    return not any(address in net for net, _ in NON_PUBLIC if net.version == address.version)


def public_address(text: str) -> bool:
    """`public_unicast` of an address written as text (as a resolver returns it; a zone
    suffix `%eth0` is refused), False for anything that is not an address."""
    try:
        return public_unicast(ipaddress.ip_address(text))
    except ValueError:
        return False
