"""Who may register and sign in, and from where: dynamic registration's limit and the
retention of unused clients, the proxies whose forwarding headers name the client's
address, and the failed sign-in throttle (docs/decisions/oauth.md)."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from service.errors import ConfigError
from service.settings.reading import parse, positive_float, positive_int

ProxyNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
FORWARDING_HEADERS = ("x-forwarded-for", "forwarded")


@dataclass(frozen=True)
class Registration:
    """Dynamic registration's limit per client address (a token bucket: `burst` at once,
    refilled at `per_hour`), and how long a client that never completed an authorization
    is kept (`unused_retention_hours`; swept every `sweep_seconds` by each replica)."""

    burst: int = 10
    per_hour: int = 30
    unused_retention_hours: int = 168
    sweep_seconds: float = 600.0


def read_registration(env: Mapping[str, str]) -> Registration:
    return Registration(
        burst=parse(env, "ELOVA_OAUTH_REGISTER_BURST", positive_int, 10),
        per_hour=parse(env, "ELOVA_OAUTH_REGISTER_PER_HOUR", positive_int, 30),
        unused_retention_hours=parse(
            env, "ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS", positive_int, 168
        ),
        sweep_seconds=parse(env, "ELOVA_OAUTH_CLIENT_SWEEP_SECONDS", positive_float, 600.0),
    )


@dataclass(frozen=True)
class TrustedProxies:
    """Which peers may say who the client is (service/client_address.py): the networks of
    ELOVA_TRUSTED_PROXIES (none: the connection's peer is the client) and the one header
    they write, ELOVA_TRUSTED_PROXY_HEADER (the other is never read)."""

    networks: tuple[ProxyNetwork, ...] = ()
    header: str = "x-forwarded-for"
    # What service/client_address.py worked out, remembered (it is asked on every request):
    # a peer's canonical address and whether it is trusted; a header entry's, likewise.
    peers: dict[str, tuple[str, bool]] = field(default_factory=dict, compare=False, repr=False)
    entries: dict[str, tuple[str | None, bool]] = field(
        default_factory=dict, compare=False, repr=False
    )


@dataclass(frozen=True)
class SigninThrottle:
    """Failed sign-ins (service/auth/oauth/throttle.py). An (account, address) pair may fail
    `free_failures` times; each further failure makes its next attempt wait, from
    `first_delay_seconds` doubling up to `longest_delay_seconds`. An account is held for
    everyone but its known addresses once failures within `window_seconds` come from
    `account_addresses` distinct addresses; an address, for every account, after
    `address_failures` failures within the window."""

    free_failures: int = 3
    first_delay_seconds: float = 2.0
    longest_delay_seconds: float = 900.0
    window_seconds: float = 900.0
    account_addresses: int = 10
    address_failures: int = 30


def read_trusted_proxies(env: Mapping[str, str]) -> TrustedProxies:
    no_networks: tuple[ProxyNetwork, ...] = ()
    networks = parse(env, "ELOVA_TRUSTED_PROXIES", _networks, no_networks)
    header = parse(env, "ELOVA_TRUSTED_PROXY_HEADER", _forwarding_header, "x-forwarded-for")
    return TrustedProxies(networks, header)


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


def read_signin_throttle(env: Mapping[str, str]) -> SigninThrottle:
    settings = SigninThrottle(
        free_failures=parse(env, "ELOVA_SIGNIN_FREE_FAILURES", positive_int, 3),
        first_delay_seconds=parse(env, "ELOVA_SIGNIN_FIRST_DELAY_SECONDS", positive_float, 2.0),
        longest_delay_seconds=parse(
            env, "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS", positive_float, 900.0
        ),
        window_seconds=parse(env, "ELOVA_SIGNIN_WINDOW_SECONDS", positive_float, 900.0),
        account_addresses=parse(env, "ELOVA_SIGNIN_ACCOUNT_ADDRESSES", positive_int, 10),
        address_failures=parse(env, "ELOVA_SIGNIN_ADDRESS_FAILURES", positive_int, 30),
    )
    if settings.longest_delay_seconds < settings.first_delay_seconds:
        raise ConfigError(
            "ELOVA_SIGNIN_LONGEST_DELAY_SECONDS is shorter than ELOVA_SIGNIN_FIRST_DELAY_SECONDS"
        )
    return settings
