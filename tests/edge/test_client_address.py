"""The client address behind trusted proxies: the settings, and the walk of X-Forwarded-For
and Forwarded from the right, as a table of what proxies (and clients lying to them) send."""

from __future__ import annotations

import ipaddress

import pytest

from service.config import Config
from service.edge.client_address import MAX_HOPS, client_of
from service.errors import ConfigError
from service.settings.proxies import TrustedProxies
from tests.support.keys import ed25519_pem

pytestmark = pytest.mark.unit


def _env(**extra: str) -> dict[str, str]:
    return {
        "ELOVA_DATABASE_URL": "postgresql://postgres@127.0.0.1/x",
        "ELOVA_SIGNING_KEY": ed25519_pem().decode(),
        **extra,
    }


def test_no_proxy_is_trusted_by_default() -> None:
    proxies = Config.from_env(_env()).trusted_proxies
    assert proxies.networks == () and proxies.header == "x-forwarded-for"


def test_trusted_proxies_take_ipv4_and_ipv6_cidrs() -> None:
    cfg = Config.from_env(
        _env(
            ELOVA_TRUSTED_PROXIES=" 10.0.0.0/8, 172.28.0.0/24,fd00::/8 ,192.0.2.7",
            ELOVA_TRUSTED_PROXY_HEADER="Forwarded",
        )
    )
    assert [str(n) for n in cfg.trusted_proxies.networks] == [
        "10.0.0.0/8",
        "172.28.0.0/24",
        "fd00::/8",
        "192.0.2.7/32",
    ]
    assert cfg.trusted_proxies.header == "forwarded"


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ELOVA_TRUSTED_PROXIES", "10.0.0.0/33"),
        ("ELOVA_TRUSTED_PROXIES", "10.0.0.1/8"),  # host bits set: a typo, not a network
        ("ELOVA_TRUSTED_PROXIES", "10.0.0.0/8,haproxy"),
        ("ELOVA_TRUSTED_PROXIES", "fd00::/129"),
        ("ELOVA_TRUSTED_PROXY_HEADER", "x-real-ip"),
        ("ELOVA_SIGNIN_FREE_FAILURES", "0"),
        ("ELOVA_SIGNIN_ACCOUNT_ADDRESSES", "many"),
        ("ELOVA_SIGNIN_LONGEST_DELAY_SECONDS", "1"),  # shorter than the first delay (2 s)
    ],
)
def test_a_bad_setting_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=variable):
        Config.from_env(_env(**{variable: value}))


NETWORKS = tuple(ipaddress.ip_network(n) for n in ("127.0.0.0/8", "10.0.0.0/8", "fd00::/8"))
XFF = "x-forwarded-for"
FWD = "forwarded"
PROXIES = {XFF: TrustedProxies(NETWORKS, XFF), FWD: TrustedProxies(NETWORKS, FWD)}

CASES = [
    # (peer, header, lines, client, why)
    ("192.0.2.9", XFF, ["203.0.113.5"], "192.0.2.9", "an untrusted peer's header is ignored"),
    ("10.0.0.2", XFF, [], "10.0.0.2", "a trusted peer without the header is the client"),
    ("10.0.0.2", XFF, ["203.0.113.5"], "203.0.113.5", "one proxy"),
    ("10.0.0.2", XFF, ["198.51.100.1, 203.0.113.5"], "203.0.113.5", "spoofed left entry"),
    ("10.0.0.2", XFF, ["1.1.1.1, 10.0.0.7, 203.0.113.5"], "203.0.113.5", "right-most wins"),
    ("10.0.0.2", XFF, ["198.51.100.1, 203.0.113.5, 10.0.0.7"], "203.0.113.5", "two proxies"),
    ("10.0.0.2", XFF, ["198.51.100.1", "203.0.113.5"], "203.0.113.5", "two lines, in order"),
    ("10.0.0.2", XFF, ["203.0.113.5", "10.0.0.7"], "203.0.113.5", "a proxy's own line"),
    ("10.0.0.2", XFF, ["203.0.113.5:4711"], "203.0.113.5", "IPv4 with a port"),
    ("10.0.0.2", XFF, ["2001:DB8::1"], "2001:db8::1", "bare IPv6, canonical"),
    ("10.0.0.2", XFF, ["[2001:db8::1]:4711"], "2001:db8::1", "bracketed IPv6 with a port"),
    ("10.0.0.2", XFF, ["::ffff:203.0.113.5"], "203.0.113.5", "IPv4-mapped IPv6"),
    ("::ffff:10.0.0.2", XFF, ["203.0.113.5"], "203.0.113.5", "a mapped peer is trusted"),
    ("10.0.0.2", XFF, ["6.6.6.6, junk"], "10.0.0.2", "garbage: the proxy is the client"),
    ("10.0.0.2", XFF, ["6.6.6.6, junk, 10.0.0.7"], "10.0.0.7", "nothing left of garbage"),
    ("10.0.0.2", XFF, ["6.6.6.6,, 10.0.0.7"], "10.0.0.7", "an empty entry is garbage"),
    ("10.0.0.2", XFF, ["unknown"], "10.0.0.2", "unknown"),
    ("10.0.0.2", XFF, ["fe80::1%eth0"], "10.0.0.2", "a zoned address is not a client"),
    ("10.0.0.2", XFF, ["10.0.0.9, 127.0.0.1"], "10.0.0.9", "every hop trusted: left-most"),
    ("10.0.0.2", FWD, ["for=203.0.113.5"], "203.0.113.5", "Forwarded"),
    ("10.0.0.2", FWD, ['for="[2001:db8::1]:4711"'], "2001:db8::1", "quoted IPv6 and port"),
    ("10.0.0.2", FWD, ['For="203.0.113.5:80";Proto=https;by=_lb'], "203.0.113.5", "mixed case"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=203.0.113.5"], "203.0.113.5", "spoofed element"),
    ("10.0.0.2", FWD, ["for=6.6.6.6", "for=203.0.113.5"], "203.0.113.5", "two lines"),
    ("10.0.0.2", FWD, ['for=6.6.6.6, for="[fd00::5]"'], "6.6.6.6", "a trusted IPv6 hop"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=unknown"], "10.0.0.2", "unknown ends the walk"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=_hidden"], "10.0.0.2", "obfuscated ends the walk"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=2001:db8::1"], "10.0.0.2", "unbracketed IPv6"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=203.0.113.5:80"], "10.0.0.2", "unquoted port"),
    ("10.0.0.2", FWD, ["for=6.6.6.6, for=1.1.1.1;for=2.2.2.2"], "10.0.0.2", "two for="),
    ("10.0.0.2", FWD, ["for=6.6.6.6, proto=http"], "10.0.0.2", "no for="),
    ("10.0.0.2", FWD, ['for=6.6.6.6, for="1.1.1.1'], "10.0.0.2", "an open quote"),
    ("10.0.0.2", FWD, ['for=6.6.6.6, by="a,b";for=1.1.1.1'], "10.0.0.2", "comma in quotes"),
    ("10.0.0.2", FWD, ['by="x;for=9.9.9.9";for=203.0.113.5'], "203.0.113.5", "; in quotes"),
    ("10.0.0.2", FWD, ['for="\\2\\03.0.113.5"'], "203.0.113.5", "quoted-pairs unescaped"),
    ("10.0.0.2", XFF, ["for=203.0.113.5"], "10.0.0.2", "a Forwarded value in XFF"),
]


@pytest.mark.parametrize(
    ("peer", "header", "lines", "client"),
    [case[:4] for case in CASES],
    ids=[case[4] for case in CASES],
)
def test_the_client_is_the_first_untrusted_hop_from_the_right(
    peer: str, header: str, lines: list[str], client: str
) -> None:
    assert client_of(peer, lines, PROXIES[header]) == client
    # Asked again (the answers are remembered), and by a fresh memory: the same.
    assert client_of(peer, lines, PROXIES[header]) == client
    assert client_of(peer, lines, TrustedProxies(NETWORKS, header)) == client


def test_only_the_nearest_hops_are_read() -> None:
    chain = [f"10.0.{i // 256}.{i % 256}" for i in range(1, 100)]
    lines = [", ".join(["203.0.113.5", *chain])]
    assert client_of("10.0.0.1", lines, PROXIES[XFF]) == chain[-MAX_HOPS]
    short = [", ".join(["203.0.113.5", *chain[: MAX_HOPS - 1]])]
    assert client_of("10.0.0.1", short, PROXIES[XFF]) == "203.0.113.5"


def test_the_memory_is_bounded() -> None:
    proxies = TrustedProxies(NETWORKS)
    for i in range(10_000):
        assert client_of("10.0.0.1", [f"203.0.{i // 256 % 256}.{i % 256}"], proxies).startswith(
            "203.0."
        )
    assert len(proxies.entries) <= 4096 and len(proxies.peers) == 1
