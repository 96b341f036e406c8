"""Redirect hosts: which host a redirect URI may name, and how the pages show one.

A redirect URI's host is an IP literal in canonical form or a domain name that IDNA (UTS 46,
non-transitional, STD3 rules: what browsers do) turns into LDH labels (`ascii_host`);
anything else is refused before it can be stored or shown. A person is shown the ASCII
(punycode) form always, and the Unicode form beside it only when every letter of the whole
host is of one script (`shown_host`). What is refused, and why whole-host scripts:
docs/decisions/oauth.md, "The consent page cannot be spoofed".
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass

import idna

from service.auth.clients.outbound_address import ipv6_text

MAX_HOST_LENGTH = 253
_LDH_LABEL = re.compile(r"(?!-)[a-z0-9-]{1,63}(?<!-)")
_OCTET = r"(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_DOTTED_QUAD = re.compile(rf"{_OCTET}(\.{_OCTET}){{3}}")
# WHATWG "ends in a number": such a host is parsed as IPv4 by browsers.
_NUMERIC_LABEL = re.compile(r"\d+|0[xX][0-9a-fA-F]*")
_PORT = re.compile(r"\d{1,5}")
# Characters named in the refusal as they are (the rest by code point).
_NAMED = {"\\": "a backslash", ";": "a semicolon", " ": "a space", "%": "a percent sign"}
# Unicode names' words after the script part: "CYRILLIC SMALL LETTER A" → "CYRILLIC".
_SCRIPT_END = re.compile(
    r" (?:CAPITAL |SMALL )?(?:LETTER|LIGATURE|SYLLABLE|SYLLABICS|CHARACTER|IDEOGRAPH|"
    r"VOWEL|SIGN|CONSONANT|DIGIT|NUMBER|ITERATION|PROLONGED|MARK|VOICED|SEMI-VOICED)\b"
)


@dataclass(frozen=True, slots=True)
class ShownHost:
    """A host as the pages show it: `ascii` (punycode, lower case, with the port) always,
    `unicode` beside it only for a single-script internationalized name."""

    ascii: str
    unicode: str | None = None

    @property
    def text(self) -> str:
        """One line: `xn--e1afmkfd.xn--p1ai (пример.рф)`, or the ASCII form alone."""
        return f"{self.ascii} ({self.unicode})" if self.unicode else self.ascii


def split_authority(netloc: str) -> tuple[str, str | None]:
    """(host, port) of an authority without user information; ValueError when malformed."""
    if netloc.startswith("["):
        end = netloc.find("]")
        if end < 0:
            raise ValueError("an IPv6 address is missing its closing bracket")
        host, rest = netloc[: end + 1], netloc[end + 1 :]
    else:
        host, sep, port = netloc.partition(":")
        rest = sep + port
    if not rest:
        return host, None
    if not rest.startswith(":") or not _PORT.fullmatch(rest[1:]) or int(rest[1:]) > 65535:
        raise ValueError("the port is not a number from 0 to 65535")
    return host, rest[1:]


def _character_problem(host: str) -> str | None:
    for ch in host:
        cat = unicodedata.category(ch)
        if ch in _NAMED or ch.isspace() or cat[0] in "CZ" or ch in "\"<>^`{|}'()*,!$&+=@[]:/?#":
            shown = _NAMED.get(ch) or f"U+{ord(ch):04X}"
            return f"the host {host!r} contains {shown}, which a host name cannot"
    return None


def ascii_host(host: str) -> str:
    """The host in canonical ASCII (lower case, punycode), or ValueError saying why it
    cannot be a redirect host. `host` is as written in the URI (brackets kept)."""
    if not host:
        raise ValueError("the URI names no host")
    if host.startswith("["):
        return _ipv6_literal(host)
    problem = _character_problem(host)
    if problem is not None:
        raise ValueError(problem)
    written_ascii = host.isascii()
    try:
        encoded = host.lower() if written_ascii else _idna(host)
    except idna.IDNAError:
        raise ValueError(f"the host {host!r} is not a valid international domain name") from None
    name = encoded[:-1] if encoded.endswith(".") else encoded
    labels = name.split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        if not written_ascii:
            raise ValueError(f"the host {host!r} is an IP address written with non-ASCII digits")
        if not _DOTTED_QUAD.fullmatch(name):
            raise ValueError(f"the host {host!r} is not an IPv4 address in dotted-quad form")
        return name
    if len(name) > MAX_HOST_LENGTH or not all(_LDH_LABEL.fullmatch(label) for label in labels):
        raise ValueError(f"the host {host!r} is not a valid host name")
    if any(label.startswith("xn--") for label in labels):
        try:
            idna.decode(name)
        except idna.IDNAError:
            raise ValueError(f"the host {host!r} has an xn-- label that does not decode") from None
    return encoded


def _ipv6_literal(host: str) -> str:
    if "%" in host:
        raise ValueError(f"{host!r} has a zone identifier, which a redirect host cannot")
    try:
        address = ipaddress.IPv6Address(host[1:-1])
    except ValueError:
        raise ValueError(f"{host!r} is not an IPv6 address") from None
    return f"[{ipv6_text(address)}]"


def _idna(host: str) -> str:
    trailing = "." if host.endswith((".", "\u3002", "\uff0e", "\uff61")) else ""
    body = host[:-1] if trailing else host
    return str(idna.encode(body, uts46=True, std3_rules=True, transitional=False).decode()) + (
        trailing
    )


def script_of(ch: str) -> str | None:
    """The script a letter's Unicode name gives (`CYRILLIC SMALL LETTER A` → CYRILLIC; None:
    digits, hyphens, combining marks). A letter whose name does not say counts as a script
    of its own, so an unknown case can only hide the Unicode form, never show a mixed one."""
    if not unicodedata.category(ch).startswith("L"):
        return None
    name = unicodedata.name(ch, "")
    found = _SCRIPT_END.search(name)
    return name[: found.start()] if found else f"U+{ord(ch):04X}"


def single_script(text: str) -> bool:
    scripts = {s for s in map(script_of, text) if s is not None}
    return len(scripts) <= 1


def shown_host(host: str, port: str | None = None) -> ShownHost:
    """How a page shows a (valid) host: punycode, and the Unicode form beside it only when
    it is internationalized and of a single script."""
    encoded = ascii_host(host)
    suffix = f":{port}" if port is not None else ""
    unicode: str | None = None
    if "xn--" in encoded:
        try:
            decoded = idna.decode(encoded.rstrip("."))
        except idna.IDNAError:
            decoded = encoded
        if decoded != encoded.rstrip(".") and single_script(decoded):
            unicode = decoded + suffix
    return ShownHost(encoded + suffix, unicode)
