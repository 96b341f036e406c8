"""The authorization endpoint: errors shown on a page until the client and its redirect URI
are trusted, errors sent back (with state and iss) after; sign-in first when needed; the
approval page's headers."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, authorize_params, pkce, query_of


async def test_unregistered_redirect_uri_is_shown_on_a_page_not_redirected(oauth: OAuth) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    for uri in (
        "https://evil.example/steal",
        reg.redirect_uri + "/extra",
        reg.redirect_uri.upper(),
    ):
        params = authorize_params(reg, challenge, oauth.resource, redirect_uri=uri)
        resp, html = await oauth.approval_page(params)
        assert resp.status == 400
        assert "Location" not in resp.headers
        assert "not one the application registered" in html
        assert "evil.example" not in html


async def test_unknown_client_is_shown_on_a_page(oauth: OAuth) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource, client_id="dyn_nope")
    resp, html = await oauth.approval_page(params)
    assert resp.status == 400 and "Location" not in resp.headers
    assert "not registered" in html
    resp, _ = await oauth.approval_page({k: v for k, v in params.items() if k != "client_id"})
    assert resp.status == 400 and "Location" not in resp.headers


async def test_operator_clients_cannot_use_the_browser_flow(oauth: OAuth) -> None:
    from service.auth.approvals import create_operator_client

    async with oauth.pool.acquire() as conn:
        client_id = await create_operator_client(conn, "operator")
    reg = await oauth.register()
    _, challenge = pkce()
    resp, _ = await oauth.approval_page(
        authorize_params(reg, challenge, oauth.resource, client_id=client_id)
    )
    assert resp.status == 400 and "Location" not in resp.headers


@pytest.mark.parametrize(
    ("over", "error"),
    [
        ({"code_challenge": None}, "invalid_request"),
        ({"code_challenge_method": "plain"}, "invalid_request"),
        ({"code_challenge_method": None}, "invalid_request"),
        ({"code_challenge": "too-short"}, "invalid_request"),
        ({"resource": None}, "invalid_target"),
        ({"resource": "https://other.example/mcp"}, "invalid_target"),
        ({"resource": "http://127.0.0.1:8080/other"}, "invalid_target"),
        ({"scope": "workspaces:read admin"}, "invalid_scope"),
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"response_type": None}, "unsupported_response_type"),
    ],
)
async def test_errors_after_the_redirect_uri_is_trusted_go_back_to_it(
    oauth: OAuth, over: dict[str, str | None], error: str
) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource, **over)
    resp, _ = await oauth.approval_page(params)
    assert resp.status == 302
    location = resp.headers["Location"]
    assert location.startswith(reg.redirect_uri + "?")
    answer = query_of(location)
    assert answer["error"] == error
    assert answer["error_description"]
    assert answer["state"] == params["state"]
    assert answer["iss"] == oauth.cfg.issuer
    assert "code" not in answer


async def test_resource_scheme_and_host_case_and_trailing_slash_are_accepted(
    oauth: OAuth, account: Account
) -> None:
    upper = oauth.resource.replace("http://127.0.0.1", "HTTP://127.0.0.1") + "/"
    got = await oauth.code_for(account, resource=upper)
    assert (await oauth.exchange(got)).status == 200


async def test_without_a_session_the_browser_signs_in_first(oauth: OAuth, account: Account) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource)
    resp, _ = await oauth.approval_page(params)
    assert resp.status == 303
    target = urlsplit(resp.headers["Location"])
    assert target.path == "/signin" and not target.netloc
    next_path = query_of(resp.headers["Location"])["next"]
    assert next_path.startswith("/authorize?")
    signed = await oauth.signin(account, next_path)
    assert signed.status == 303
    assert signed.headers["Location"] == next_path
    resp, html = await oauth.approval_page(query_of(next_path))
    assert resp.status == 200
    assert "Test Agent" in html


async def test_approval_page_headers_and_notice(oauth: OAuth, account: Account) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    await oauth.signin(account)
    resp, html = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert resp.status == 200
    csp = resp.headers["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp
    assert "default-src 'none'" in csp
    assert "script-src" not in csp  # default-src 'none' forbids every script
    # Chrome applies form-action to the redirect after the POST: the client origin is listed.
    assert "form-action 'self' http://127.0.0.1:53682;" in csp
    assert resp.headers["X-Frame-Options"] == "DENY"
    assert resp.headers["Cache-Control"] == "no-store"
    assert resp.headers["Referrer-Policy"] == "no-referrer"
    assert "personal information" in html
    assert "127.0.0.1:53682" in html
    assert "<script" not in html
    css = await oauth.http.get("/oauth/elova.css")
    assert css.status == 200 and css.content_type == "text/css"


async def test_customer_controlled_names_are_escaped(oauth: OAuth) -> None:
    from tests.auth.flow import seed_account

    evil = '"><img src=x onerror=alert(1)><b>'
    acc = await seed_account(oauth.pool, workspaces=1, names=[evil])
    reg = await oauth.register(client_name="<script>alert('c')</script>")
    _, challenge = pkce()
    await oauth.signin(acc)
    _, html = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert evil not in html and "<script>alert" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;script&gt;alert(&#39;c&#39;)&lt;/script&gt;" in html


async def test_page_lists_at_most_200_workspaces(oauth: OAuth) -> None:
    from tests.auth.flow import forms, seed_account

    acc = await seed_account(oauth.pool, workspaces=205)
    reg = await oauth.register()
    _, challenge = pkce()
    await oauth.signin(acc)
    resp, html = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert resp.status == 200
    boxes = [o for o in forms(html)[0]["options"] if o[0] == "workspace"]
    assert len(boxes) == 200
    assert "Showing the first 200 of 205 workspaces" in html
    assert "Europe/Berlin" in html and "owner" in html and "admin" in html
