"""The consent page's rules as pure functions: which redirect hosts are refused, how a host
is shown (punycode, and Unicode only for one script), what a client name keeps, and that
the CSP takes serialized origins only. (No engines: part of UNIT_TESTS.)"""

from __future__ import annotations

import unicodedata

import pytest

from service.auth.clients.names import clean_client_name, shown_client_name
from service.auth.clients.redirect_hosts import ShownHost, shown_host
from service.auth.clients.registry import redirect_host, redirect_origin, redirect_uri_refusal
from service.auth.pages.rendering import content_security_policy

pytestmark = pytest.mark.unit

REFUSED_HOSTS = [
    "https://evil.example\\.good.example/cb",  # browsers read \ as /: goes to evil.example
    "https://evil.example\\@good.example/cb",
    "https://\\evil.example/cb",
    "https://good.example;script-src/cb",
    "https://good.example;/cb",
    "https://good example/cb",
    "https://good\texample/cb",
    "https://good\x00example/cb",
    "https://good\x85example/cb",  # C1 control
    "https://good\u200bexample.com/cb",  # zero-width space
    "https://good\u202eexample.com/cb",  # right-to-left override
    "https://good\u00adexample.com/cb",  # soft hyphen (Cf)
    "https://good\u3000example.com/cb",  # ideographic space
    "https://good%2eexample/cb",
    "https://good_example.com/cb",
    "https://good.example<x>/cb",
    "https://good.example|x/cb",
    "https://-good.example/cb",
    "https://good..example/cb",
    "https://0x7f.0.0.1/cb",  # browsers read it as 127.0.0.1
    "https://2130706433/cb",
    "https://127.1/cb",
    "https://１２７.０.０.１/cb",  # full-width digits: an IP address in disguise
    "https://١٢٧.٠.٠.١/cb",  # Arabic-Indic digits
    "https://xn--zz.example/cb",  # an xn-- label that does not decode
    "https://[fe80::1%25eth0]/cb",  # zone identifier
    "https://[v1.fe]/cb",
    "cursor://anysphere\\.cursor-mcp/cb",
    "cursor://anysphere;cursor/cb",
    "cursor://any%73phere/cb",
]


@pytest.mark.parametrize("uri", REFUSED_HOSTS)
def test_hosts_a_browser_would_read_otherwise_are_refused(uri: str) -> None:
    refusal = redirect_uri_refusal(uri)
    assert refusal is not None, uri
    assert redirect_origin(uri) is None


@pytest.mark.parametrize(
    ("uri", "origin"),
    [
        ("https://App.Example.com/cb", "https://app.example.com"),
        ("https://app.example.com:8443/cb?x=1", "https://app.example.com:8443"),
        ("https://аррӏе.com/cb", "https://xn--80ak6aa92e.com"),
        ("https://пример.рф/cb", "https://xn--e1afmkfd.xn--p1ai"),
        ("http://127.0.0.1:53682/callback", "http://127.0.0.1:53682"),
        ("http://[::1]:8000/cb", "http://[::1]:8000"),
        ("http://localhost/cb", "http://localhost"),
        ("https://example.com./cb", "https://example.com."),
        ("cursor://anysphere.cursor-mcp/oauth/callback", "cursor:"),
        ("com.example.app:/cb", "com.example.app:"),
    ],
)
def test_accepted_uris_give_a_serialized_origin(uri: str, origin: str) -> None:
    assert redirect_uri_refusal(uri) is None
    assert redirect_origin(uri) == origin


@pytest.mark.parametrize(
    ("host", "shown"),
    [
        # Cyrillic homograph of apple.com: mixed scripts (Cyrillic label, Latin TLD).
        ("аррӏе.com", ShownHost("xn--80ak6aa92e.com")),
        ("xn--80ak6aa92e.com", ShownHost("xn--80ak6aa92e.com")),
        # Greek and Latin letters in one label.
        ("αpple.com", ShownHost("xn--pple-zld.com")),
        ("ελλάδα.gr", ShownHost("xn--hxakic4aa.gr")),
        # Japanese mixes Han and Hiragana: not one script, so punycode only.
        ("例え.jp", ShownHost("xn--r8jz45g.jp")),
        ("abc.xn--p1ai", ShownHost("abc.xn--p1ai")),
        # One script throughout: Unicode beside the punycode.
        ("пример.рф", ShownHost("xn--e1afmkfd.xn--p1ai", "пример.рф")),
        ("münchen.de", ShownHost("xn--mnchen-3ya.de", "münchen.de")),
        ("xn--mnchen-3ya.de", ShownHost("xn--mnchen-3ya.de", "münchen.de")),
        ("ελλάδα.ελ", ShownHost("xn--hxakic4aa.xn--qxam", "ελλάδα.ελ")),
        (
            "موقع.وزارة-الاتصالات.مصر",
            ShownHost(
                "xn--4gbrim.xn----ymcbaaajlc6dj7bxne2c.xn--wgbh1c", "موقع.وزارة-الاتصالات.مصر"
            ),
        ),
        ("Example.COM", ShownHost("example.com")),
    ],
)
def test_hosts_are_shown_in_punycode_with_unicode_only_for_one_script(
    host: str, shown: ShownHost
) -> None:
    assert shown_host(host) == shown


def test_the_shown_host_keeps_the_port_and_reads_as_one_line() -> None:
    shown = redirect_host("https://пример.рф:8443/cb")
    assert shown == ShownHost("xn--e1afmkfd.xn--p1ai:8443", "пример.рф:8443")
    assert shown.text == "xn--e1afmkfd.xn--p1ai:8443 (пример.рф:8443)"
    assert redirect_host("https://аррӏе.com/cb").text == "xn--80ak6aa92e.com"


BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
        "\u2069", "\u200e", "\u200f", "\u061c"]  # fmt: skip
INVISIBLE = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u180e", "\u2061",
             "\U000e0041", "\ufff9", "\u115f", "\u3164", "\u2800", "\u034f", "\ufe0f",
             "\u2028", "\u2029"]  # fmt: skip


@pytest.mark.parametrize("ch", BIDI + INVISIBLE)
def test_bidirectional_and_invisible_characters_are_removed_from_names(ch: str) -> None:
    assert clean_client_name(f"Good{ch}App{ch}") == "GoodApp"


def test_no_format_character_survives_in_a_name() -> None:
    every_cf = "".join(chr(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf")
    cleaned = clean_client_name("A" + every_cf + "B")
    assert cleaned == "AB"


def test_names_keep_what_a_person_reads() -> None:
    assert clean_client_name("Claude \u202eresu\u202c for Desktop") == "Claude resu for Desktop"
    assert clean_client_name("  Über\u00a0App\u3000日本  ") == "Über App 日本"
    assert clean_client_name("Bad\x00\x1bName") == "Bad\ufffd\ufffdName"
    assert clean_client_name("Z\u0301\u0302\u0303\u0304alg") == "Z\u0301\u0302alg"
    assert shown_client_name("\u202e\u200b") == "Unnamed application"


def test_the_csp_lists_only_serialized_origins() -> None:
    policy = content_security_policy(
        [
            "https://xn--80ak6aa92e.com",
            "https://a.example; script-src *",
            "https://a.example\\@b",
            None,
            "cursor:",
            "http://[::1]:8000",
            "https://a.example/path",
            "javascript:alert(1)",
        ]
    )
    assert policy == (
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self' "
        "https://xn--80ak6aa92e.com cursor: http://[::1]:8000; frame-ancestors 'none'; "
        "base-uri 'none'"
    )
