"""The consent page cannot be made to lie, against the running app: homograph hosts are
shown in punycode (Unicode beside it only for one script), hosts a browser would read
otherwise are refused at registration and in metadata documents, names lose bidi and
invisible characters, and the CSP names only the serialized redirect origin."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from service.app_keys import METRICS
from service.auth.clients.metadata_documents import validate_document
from service.errors import FetchRefused
from tests.auth.browser_flow import OAuth
from tests.auth.clients.test_hosts import BIDI, INVISIBLE, REFUSED_HOSTS
from tests.auth.clients.test_metadata_documents import DocumentServer, cimd, docs  # noqa: F401 - fixtures
from tests.auth.flow import Account, Registered, authorize_params, pkce, seed_account


async def page_for(oauth: OAuth, account: Account, reg: Registered) -> tuple[Any, str]:
    signed = await oauth.signin(account)
    assert signed.status == 303
    _, challenge = pkce()
    resp, html = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert resp.status == 200, html
    return resp, html


def visible_text(html: str) -> str:
    """What the page shows: its text outside tags (attributes are not read by a person)."""
    return re.sub(r"<[^>]*>", " ", html)


def form_action(resp: Any) -> str:
    policy: str = resp.headers["Content-Security-Policy"]
    return next(d for d in policy.split("; ") if d.startswith("form-action "))


@pytest.mark.parametrize(
    ("uri", "ascii_host", "hidden"),
    [
        # A Cyrillic homograph of apple.com: only the punycode is shown.
        ("https://аррӏе.com/cb", "xn--80ak6aa92e.com", "аррӏе"),
        ("https://xn--80ak6aa92e.com/cb", "xn--80ak6aa92e.com", "аррӏе"),
        # Greek alpha in a Latin name; a Cyrillic "о" in google.
        ("https://αpple.com/cb", "xn--pple-zld.com", "αpple"),
        ("https://gооgle.com/cb", "xn--ggle-55da.com", "gооgle"),
    ],
)
async def test_a_mixed_script_host_is_shown_in_punycode_only(
    oauth: OAuth, account: Account, uri: str, ascii_host: str, hidden: str
) -> None:
    reg = await oauth.register([uri])
    resp, html = await page_for(oauth, account, reg)
    assert f'<strong class="host">{ascii_host}</strong>' in html
    assert f'<strong class="client-host-name">{ascii_host}</strong>' in html
    assert hidden not in visible_text(html)  # (the hidden form field carries the URI as sent)
    assert form_action(resp) == f"form-action 'self' https://{ascii_host}"


async def test_a_single_script_host_shows_its_unicode_form_beside_the_punycode(
    oauth: OAuth, account: Account
) -> None:
    reg = await oauth.register(["https://пример.рф:8443/cb"])
    resp, html = await page_for(oauth, account, reg)
    assert '<strong class="host">xn--e1afmkfd.xn--p1ai:8443</strong>' in html
    assert '<span class="host-unicode">(пример.рф:8443)</span>' in html
    assert form_action(resp) == "form-action 'self' https://xn--e1afmkfd.xn--p1ai:8443"


# A NUL is bad input before it is a bad host: /register refuses any body carrying one
# (invalid_client_metadata, tests/hostile/test_bad_bytes.py) before reading its URIs.
HOSTS_REFUSED_AS_HOSTS = [uri for uri in REFUSED_HOSTS if "\x00" not in uri]


async def test_a_nul_in_a_redirect_host_is_refused_as_bad_input(oauth: OAuth) -> None:
    body = {"redirect_uris": ["https://ok.example/cb", "https://good\x00example/cb"]}
    resp = await oauth.http.post("/register", json=body)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"] == "invalid_client_metadata"


@pytest.mark.parametrize("uri", HOSTS_REFUSED_AS_HOSTS)
async def test_registration_refuses_hosts_a_browser_reads_otherwise(oauth: OAuth, uri: str) -> None:
    body = {"redirect_uris": ["https://ok.example/cb", uri]}
    resp = await oauth.http.post("/register", json=body)
    assert resp.status == 400, await resp.text()
    assert (await resp.json())["error"] == "invalid_redirect_uri"
    refused = (
        oauth.http.app[METRICS].registry.get_sample_value(
            "elova_mcp_registration_refusals_total", {"reason": "host"}
        )
        or 0
    )
    spaces = (
        oauth.http.app[METRICS].registry.get_sample_value(
            "elova_mcp_registration_refusals_total", {"reason": "redirect_uri"}
        )
        or 0
    )
    assert refused + spaces == 1  # whitespace and controls anywhere: the URI rule


async def test_the_csp_carries_only_the_validated_origin(oauth: OAuth, account: Account) -> None:
    reg = await oauth.register(["https://App.Example.com:8443/cb?x=1"])
    resp, _ = await page_for(oauth, account, reg)
    assert resp.headers["Content-Security-Policy"] == (
        "default-src 'none'; style-src 'self'; img-src 'self'; "
        "form-action 'self' https://app.example.com:8443; frame-ancestors 'none'; "
        "base-uri 'none'"
    )


async def test_a_stored_uri_from_before_the_rules_cannot_reach_the_page_or_the_csp(
    oauth: OAuth, account: Account
) -> None:
    """A row written before these rules (here by SQL) with `;` in its host: /authorize
    refuses it on a page, and nothing of it reaches a header."""
    reg = await oauth.register(["https://ok.example/cb"])
    bad = "https://good.example;script-src *;/cb"
    await oauth.pool.execute(
        "UPDATE oauth_clients SET redirect_uris = $2 WHERE client_id = $1", reg.client_id, [bad]
    )
    await oauth.signin(account)
    _, challenge = pkce()
    params = authorize_params(Registered(reg.client_id, bad, {}), challenge, oauth.resource)
    resp, html = await oauth.approval_page(params)
    assert resp.status == 400
    assert "script-src *" not in resp.headers["Content-Security-Policy"]
    assert "good.example" not in resp.headers["Content-Security-Policy"]


async def test_bidi_and_invisible_characters_never_reach_the_page(
    oauth: OAuth, account: Account
) -> None:
    tricky = "Evil " + "".join(BIDI) + "elgooG" + "".join(INVISIBLE) + " App"
    reg = await oauth.register(client_name=tricky)
    assert reg.body["client_name"] == "Evil elgooG App"
    resp, html = await page_for(oauth, account, reg)
    assert '<span class="client">Evil elgooG App</span>' in html
    for ch in BIDI + INVISIBLE:
        assert ch not in html, f"U+{ord(ch):04X}"


async def test_names_stored_before_the_rules_are_cleaned_when_shown(
    oauth: OAuth, account: Account
) -> None:
    reg = await oauth.register()
    await oauth.pool.execute(
        "UPDATE oauth_clients SET client_name = $2 WHERE client_id = $1",
        reg.client_id,
        "Good\u202eppA\u202c\u200b",
    )
    _, html = await page_for(oauth, account, reg)
    assert '<span class="client">GoodppA</span>' in html
    assert "\u202e" not in html and "\u200b" not in html


async def test_metadata_documents_obey_the_same_rules(
    cimd: OAuth,  # noqa: F811 - the fixture
    docs: DocumentServer,  # noqa: F811
) -> None:
    account = await seed_account(cimd.pool, workspaces=1)
    await cimd.signin(account)
    _, challenge = pkce()
    reg = Registered(docs.url, "http://127.0.0.1/callback", {})
    docs.body = docs.document(redirect_uris=["https://evil.example\\.good.example/cb"])
    resp, html = await cimd.approval_page(authorize_params(reg, challenge, cimd.resource))
    assert resp.status == 400 and "backslash" in html
    other = Registered(docs.base + "/elsewhere.json", "http://127.0.0.1/callback", {})
    docs.body = {**docs.document(logo_uri="https://a.example/" + "x" * 1000),
                 "client_id": other.client_id}  # fmt: skip
    resp, html = await cimd.approval_page(authorize_params(other, challenge, cimd.resource))
    assert resp.status == 400 and "logo_uri" in html


def test_a_metadata_document_name_is_cleaned_like_a_registered_one() -> None:
    url = "https://client.example/oauth/client.json"
    body = {
        "client_id": url,
        "client_name": "Cla\u202eude\u2066\u200b",
        "redirect_uris": ["https://client.example/cb"],
        "contacts": ["someone@example.com"],
        "tos_uri": "https://client.example/tos",
    }
    accepted = validate_document(url, json.dumps(body).encode())
    assert accepted.name == "Claude"
    assert accepted.metadata == {"tos_uri": "https://client.example/tos"}
    for field, value in [
        ("client_name", "n" * 201),
        ("redirect_uris", [f"https://client.example/{i}" for i in range(11)]),
        ("software_version", "1" * 101),
        ("policy_uri", "https://client.example/\u202e"),
    ]:
        with pytest.raises(FetchRefused, match=field):
            validate_document(url, json.dumps({**body, field: value}).encode())


async def test_approving_a_client_with_an_international_host_redirects_to_it(
    oauth: OAuth, account: Account
) -> None:
    """The code goes back to the URI as registered, written in ASCII in the Location header
    (host in punycode, the rest percent-encoded): the same URL to a browser."""
    reg = await oauth.register(["https://пример.рф/путь?x=ü&y=%41"])
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource)
    await oauth.signin(account)
    resp = await oauth.decide(params, workspaces=account.workspaces[:1])
    assert resp.status == 303, await resp.text()
    location = resp.headers["Location"]
    assert location.isascii()
    expected = "https://xn--e1afmkfd.xn--p1ai/%D0%BF%D1%83%D1%82%D1%8C?x=%C3%BC&y=%41&code="
    assert location.startswith(expected), location
    assert "https://xn--e1afmkfd.xn--p1ai" in resp.headers["Content-Security-Policy"]
    got = await oauth.code_for(account, reg)
    assert got["code"]
    tokens = await oauth.exchange(got)
    assert tokens.status == 200, await tokens.text()
