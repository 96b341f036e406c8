"""The proxies whose forwarding headers name the client's address: ELOVA_TRUSTED_PROXIES and
ELOVA_TRUSTED_PROXY_HEADER (docs/decisions/oauth.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.settings.variables import read_section, setting

ProxyNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded")


def _networks(raw: str) -> tuple[ProxyNetwork, ...]:
    out = []
    for item in filter(None, (part.strip() for part in raw.split(","))):
        try:
            out.append(ipaddress.ip_network(item, strict=True))
        except ValueError as err:
            raise ValueError(
                f"expected CIDRs such as 10.0.0.0/8,fd00::/8 (no host bits set), got {item!r}"
            ) from err
    return tuple(out)


def _forwarding_header(raw: str) -> str:
    if raw.lower() not in FORWARDING_HEADERS:
        raise ValueError("expected x-forwarded-for or forwarded")
    return raw.lower()


@dataclass(frozen=True)
class TrustedProxies:
    """Which peers may say who the client is (service/edge/client_address.py): the networks of
    ELOVA_TRUSTED_PROXIES (none: the connection's peer is the client) and the one header
    they write, ELOVA_TRUSTED_PROXY_HEADER (the other is never read)."""

    networks: tuple[ProxyNetwork, ...] = setting("ELOVA_TRUSTED_PROXIES", _networks, ())
    header: str = setting("ELOVA_TRUSTED_PROXY_HEADER", _forwarding_header, "x-forwarded-for")
    # What service/edge/client_address.py worked out, remembered (it is asked on every request):
    # a peer's canonical address and whether it is trusted; a header entry's, likewise.
    peers: dict[str, tuple[str, bool]] = field(default_factory=dict, compare=False, repr=False)
    entries: dict[str, tuple[str | None, bool]] = field(
        default_factory=dict, compare=False, repr=False
    )


def read_trusted_proxies(env: Mapping[str, str]) -> TrustedProxies:
    return read_section(TrustedProxies, env)
