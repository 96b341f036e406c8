"""Where the metadata-document fetch may connect (service/auth/clients/outbound_address.py and
the URL rules of document_fetch.py): tables of host forms and addresses, the reproductions of
the security review (issue 21) and the general rule beyond them. Pure: no socket, no DNS."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path

import pytest
from yarl import URL

from service.auth.clients.document_fetch import (
    BAD_HOST,
    NOT_PUBLIC,
    JudgedAddressResolver,
    document_target,
)
from service.auth.clients.outbound_address import (
    NON_PUBLIC,
    embedded_ipv4,
    parse_authority,
    parse_host,
    public_address,
)
from service.errors import FetchRefused, PrivateAddress

pytestmark = pytest.mark.unit

# The zero of each digit script; its digits follow it in Unicode. All are decimal digits
# (category Nd): IDNA maps some onto ASCII digits (full-width, mathematical), the others
# become punycode labels; the form rule refuses every one before asking.
DIGIT_ZEROS = {
    "full-width": 0xFF10,
    "Arabic-Indic": 0x0660,
    "extended Arabic-Indic": 0x06F0,
    "Devanagari": 0x0966,
    "Bengali": 0x09E6,
    "Thai": 0x0E50,
    "mathematical bold": 0x1D7CE,
    "mathematical double-struck": 0x1D7D8,
    "mathematical monospace": 0x1D7F6,
}
DOTS = {
    "ASCII": ".",
    "ideographic full stop": "\u3002",
    "full-width full stop": "\uff0e",
    "half-width ideographic full stop": "\uff61",
}
TARGETS = ("127.0.0.1", "10.0.0.1", "169.254.169.254", "192.168.1.1", "8.8.8.8")


def spelled(address: str, zero: int | None, dot: str) -> str:
    digits = address if zero is None else "".join(
        chr(zero + int(ch)) if ch.isdigit() else ch for ch in address
    )  # fmt: skip
    return digits.replace(".", dot)


UNICODE_HOSTS = [
    pytest.param(spelled(a, zero, dot), id=f"{a}-{script}-{dot_name}")
    for a in TARGETS
    for script, zero in [*DIGIT_ZEROS.items(), ("ASCII digits", None)]
    for dot_name, dot in DOTS.items()
    if not (zero is None and dot == ".")
]


@pytest.mark.parametrize("host", UNICODE_HOSTS)
def test_unicode_digits_and_dots_are_refused_before_anything(host: str) -> None:
    assert parse_host(host) is None
    with pytest.raises(FetchRefused, match="must be an ASCII host name"):
        document_target(f"https://{host}/client.json", allow_private=False)
    # With the private flag too: the form rule is not an address rule.
    with pytest.raises(FetchRefused, match="must be an ASCII host name"):
        document_target(f"https://{host}/client.json", allow_private=True)


@pytest.mark.parametrize(
    "host",
    [
        "１２７.０.０.１",
        "𝟏𝟐𝟕.𝟎.𝟎.𝟏",
        "𝟙𝟚𝟟.𝟘.𝟘.𝟙",
        "127。0。0。1",
        "127．0．0．1",
        "１２７｡０｡０｡１",
    ],  # fmt: skip
)
def test_the_http_stack_reads_those_hosts_as_addresses(host: str) -> None:
    """Why the form rule exists: yarl (aiohttp's URL) maps them onto 127.0.0.1, an IP literal
    that aiohttp connects to without asking any resolver."""
    assert URL(f"https://{host}/client.json").raw_host == "127.0.0.1"


@pytest.mark.parametrize(
    "host",
    [
        # legacy IPv4 spellings inet_aton (and so getaddrinfo) accepts
        "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "2130706433", "017700000001", "127.1",
        "127.0.1", "10.1", "0.0.0.0.", "127.0.0.01", "127.000.000.001", "00127.0.0.1",
        "127.0.0.1.", "127.0.0.256", "1.2.3.4.5", "::1", "[::1", "::1]", "[::1%25lo]",
        "[fe80::1%eth0]", "[v1.x]",
        # percent-encoding, backslashes, other punctuation and trailing garbage
        "%31%32%37.0.0.1", "127.0.0.1%00", "127.0.0.1\\", "evil.example\\127.0.0.1",
        "a_b.example", "example.com.", "example..com", ".example.com", "-x.example",
        "x-.example", "ex ample.com", "example.com;", "example.com,evil", "*.example",
        # non-ASCII letters (IDNA would map some to ASCII: the Kelvin sign to k)
        "\u212aelvin.example", "ｌｏｃａｌｈｏｓｔ", "exämple.com", "lo\u00adcalhost",
        "localhost\u200b", "\u0430pple.com",
        # lengths
        "a" * 64 + ".example", ".".join(["a" * 63] * 4) + ".example", "",
    ],
)  # fmt: skip
def test_refused_host_forms(host: str) -> None:
    assert parse_host(host) is None


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("example.com", "example.com"),
        ("Docs.Example.COM", "docs.example.com"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("a-b.c-d.example", "a-b.c-d.example"),
        ("127.0.0.1.example", "127.0.0.1.example"),
        ("0x7f.example", "0x7f.example"),
        ("localhost", "localhost"),
        ("8.8.8.8", "8.8.8.8"),
        ("[2606:4700::1111]", "2606:4700::1111"),
        ("[2606:4700:0:0:0:0:0:1111]", "2606:4700::1111"),
        ("[::FFFF:127.0.0.1]", "::ffff:7f00:1"),
        ("a" * 63 + ".example", "a" * 63 + ".example"),
    ],
)
def test_accepted_host_forms(host: str, name: str) -> None:
    parsed = parse_host(host)
    assert parsed is not None and parsed.name == name


@pytest.mark.parametrize(
    ("authority", "port"),
    [("example.com", None), ("example.com:8443", 8443), ("[::1]:443", 443), ("1.2.3.4:1", 1)],
)
def test_authorities(authority: str, port: int | None) -> None:
    parsed = parse_authority(authority)
    assert parsed is not None and parsed[1] == port


@pytest.mark.parametrize(
    "authority",
    ["example.com:", "example.com:0", "example.com:65536", "example.com:+443", "example.com:８",
     "example.com:443:443", "[::1]443", "user@example.com", "example.com:0x1bb"],
)  # fmt: skip
def test_refused_authorities(authority: str) -> None:
    assert parse_authority(authority) is None


def teredo(server: str, client: str) -> str:
    """A Teredo address: 2001:0::/32, the server's IPv4, flags, port, the client's IPv4
    XORed with all ones (RFC 4380)."""
    value = (0x20010000 << 96) | (int(ipaddress.IPv4Address(server)) << 64) | (0x8000 << 48)
    value |= (0xFFFF ^ 40000) << 32
    value |= 0xFFFFFFFF ^ int(ipaddress.IPv4Address(client))
    return str(ipaddress.IPv6Address(value))


def six_to_four(v4: str) -> str:
    return str(ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1))


# Every IPv6 form that carries an IPv4 address, as a function of that address.
CARRIERS: dict[str, Callable[[str], str]] = {
    "IPv4-mapped": lambda v4: f"::ffff:{v4}",
    "IPv4-compatible": lambda v4: f"::{v4}",
    "SIIT": lambda v4: f"::ffff:0:{v4}",
    "NAT64": lambda v4: f"64:ff9b::{v4}",
    "6to4": six_to_four,
    "Teredo client": lambda v4: teredo("65.54.227.120", v4),
    "Teredo server": lambda v4: teredo(v4, "8.8.4.4"),
    "ISATAP": lambda v4: f"2001:4860:1::5efe:{v4}",
    "ISATAP (u bit)": lambda v4: f"2001:4860:1::200:5efe:{v4}",
}
PRIVATE_V4 = ["127.0.0.1", "10.0.0.1", "169.254.169.254", "100.64.0.1", "192.168.0.1",
              "172.16.0.1", "0.0.0.0", "224.0.0.1", "255.255.255.255", "198.18.0.1",
              "192.88.99.1"]  # fmt: skip
PUBLIC_V4 = ["8.8.8.8", "1.1.1.1", "9.9.9.9"]


@pytest.mark.parametrize("form", CARRIERS)
@pytest.mark.parametrize("inside", PRIVATE_V4)
def test_transition_forms_carrying_a_private_ipv4_are_refused(form: str, inside: str) -> None:
    address = CARRIERS[form](inside)
    carried = embedded_ipv4(ipaddress.IPv6Address(address))
    assert carried is not None and ipaddress.IPv4Address(inside) in carried[1], address
    assert not public_address(address), address
    with pytest.raises(FetchRefused, match="private or local address"):
        document_target(f"https://[{address}]/client.json", allow_private=False)


@pytest.mark.parametrize("form", CARRIERS)
@pytest.mark.parametrize("inside", PUBLIC_V4)
def test_transition_forms_carrying_a_public_ipv4_are_judged_by_it(form: str, inside: str) -> None:
    address = CARRIERS[form](inside)
    assert public_address(address), address
    document_target(f"https://[{address}]/client.json", allow_private=False)


@pytest.mark.parametrize(
    "address",
    ["::", "::1", "::ffff:0:0", "::ffff:0.0.0.0", "::ffff:0:0:0", "64:ff9b::", "2002::",
     "2001::", "2001:0:ffff:ffff::", "64:ff9b:1::", "64:ff9b:1::808:808", "64:ff9b:1:ff::1"],
)  # fmt: skip
def test_bare_transition_prefixes_are_refused(address: str) -> None:
    assert not public_address(address)


@pytest.mark.parametrize(("net", "why"), NON_PUBLIC, ids=[str(n) for n, _ in NON_PUBLIC])
def test_every_non_public_block_is_refused_end_to_end_of_it(
    net: ipaddress.IPv4Network | ipaddress.IPv6Network, why: str
) -> None:
    for address in (net.network_address, net.network_address + 1, net.broadcast_address):
        assert not public_address(str(address)), (address, why)
        if net.version == 4:  # and in every form that carries it
            for form, carry in CARRIERS.items():
                assert not public_address(carry(str(address))), (form, address)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
        "192.0.1.0", "192.88.98.255", "192.88.100.0", "192.167.255.255", "192.169.0.0",
        "198.17.255.255", "198.20.0.0", "223.255.255.255", "169.253.255.255", "11.0.0.0",
        "2606:4700::1111", "2a00:1450:4001::1", "2001:4860:4860::8888", "2620:fe::fe",
    ],
)  # fmt: skip
def test_public_addresses(address: str) -> None:
    assert public_address(address)


@pytest.mark.parametrize(
    "address",
    ["fe80::1", "fe80::1%eth0", "2606:4700::1111%1", "fc00::1", "fd12:3456::1", "fec0::1",
     "ff02::1", "ff0e::1", "100::1", "2001:db8::1", "3fff::1", "2001:2::1", "2001:10::1",
     "2001:20::1", "5f00::1", "4000::1", "1::1", "junk", "", "127.0.0.1/32", "8.8.8.8 "],
)  # fmt: skip
def test_non_public_ipv6_and_non_addresses(address: str) -> None:
    assert not public_address(address)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("https://１２７.０.０.１:8443/client.json", BAD_HOST),
        ("https://127。0。0。1/client.json", BAD_HOST),
        ("https://0177.0.0.1/client.json", BAD_HOST),
        ("https://2130706433/client.json", BAD_HOST),
        ("https://127.1/client.json", BAD_HOST),
        ("https://%31%32%37.0.0.1/client.json", BAD_HOST),
        ("https://127.0.0.1\\@docs.example/client.json", "user information"),
        ("https://docs.example\\@127.0.0.1/client.json", "user information"),
        ("https://docs.example:４４３/client.json", BAD_HOST),
        ("https://127.0.0.1/client.json", NOT_PUBLIC),
        ("https://[::ffff:127.0.0.1]:22/client.json", NOT_PUBLIC),
        ("https://[64:ff9b::a9fe:a9fe]/latest/meta-data", NOT_PUBLIC),
        ("https://[2002:a9fe:a9fe::]/client.json", NOT_PUBLIC),
        ("https://[::10.0.0.1]/client.json", NOT_PUBLIC),
        ("https://[::ffff:0:10.0.0.1]/client.json", NOT_PUBLIC),
        (f"https://[{teredo('8.8.8.8', '127.0.0.1')}]/client.json", NOT_PUBLIC),
        ("https://[64:ff9b:1::808:808]/client.json", NOT_PUBLIC),
        ("http://１２７.０.０.１/client.json", BAD_HOST),
    ],
)
def test_document_urls_of_the_review(url: str, refusal: str) -> None:
    with pytest.raises(FetchRefused) as refused:
        document_target(url, allow_private=False)
    assert refusal in str(refused.value)
    assert not refused.value.transient


def test_every_non_public_literal_reads_the_same() -> None:
    """One message whatever the address or port: nothing distinguishes them but the URL."""
    messages = set()
    for url in ("https://127.0.0.1:22/a.json", "https://10.0.0.1:5432/a.json",
                "https://[::1]:6379/a.json", "https://[64:ff9b::7f00:1]:1/a.json",
                "https://169.254.169.254/latest"):  # fmt: skip
        with pytest.raises(FetchRefused) as refused:
            document_target(url, allow_private=False)
        messages.add(str(refused.value))
    assert messages == {NOT_PUBLIC}


def test_allow_private_lifts_the_address_rule_only() -> None:
    target = document_target("http://127.0.0.1:9/client.json", allow_private=True)
    assert target.port == 9 and target.host.address is not None
    assert document_target("https://[::1]/client.json", allow_private=True).port == 443
    with pytest.raises(FetchRefused, match="must use https"):
        document_target("http://docs.example/client.json", allow_private=True)


def test_accepted_document_url() -> None:
    target = document_target("https://Docs.Example.com/oauth/client.json?v=1", allow_private=False)
    assert target.host.name == "docs.example.com" and target.host.address is None
    assert target.port == 443 and target.url.raw_host == "docs.example.com"


async def test_the_connector_resolver_answers_only_for_the_judged_host() -> None:
    """Fail closed: outside a fetch (nothing judged) or for another host, it refuses."""
    resolver = JudgedAddressResolver()
    with pytest.raises(PrivateAddress):
        await resolver.resolve("localhost", 443)


def test_the_decision_table_lists_every_block() -> None:
    table = (Path(__file__).parents[3] / "docs/decisions/oauth.md").read_text()
    for net, _ in NON_PUBLIC:
        assert f"`{net}`" in table, net
