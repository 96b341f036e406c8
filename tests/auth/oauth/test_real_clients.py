"""Registering and connecting the way real clients do (issue 13): Cursor's and VS Code's app
schemes, a native app's loopback redirect on another port, confidential registrations,
CORS for browser-based clients, the exact challenges of /mcp, a scope-less /authorize and
unknown clients at /token."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, Registered, authorize_params, bearer, pkce, query_of
from tests.auth.flow import tool_call as mcp_tool_call

CURSOR = "cursor://anysphere.cursor-mcp/oauth/callback"
VSCODE = "vscode://vscode.github-authentication/did-authenticate"
NATIVE = "com.example.app:/cb"


@pytest.mark.parametrize(
    ("uri", "form_source"),
    [(CURSOR, "cursor:"), (VSCODE, "vscode:"), (NATIVE, "com.example.app:")],
)
async def test_app_scheme_redirect_completes_the_flow(
    oauth: OAuth, account: Account, uri: str, form_source: str
) -> None:
    reg = await oauth.register([uri], application_type="native")
    assert reg.body["redirect_uris"] == [uri]
    assert reg.body["application_type"] == "native"
    verifier, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource)
    assert (await oauth.signin(account)).status == 303
    page, html = await oauth.approval_page(params)
    assert page.status == 200, html
    assert "an application installed on this computer" in html
    # The browser follows the form's redirect to the app only if form-action admits it.
    assert f" {form_source}" in page.headers["Content-Security-Policy"].split("form-action")[1]
    resp = await oauth.decide(params, workspaces=account.workspaces[:1])
    assert resp.status == 303, await resp.text()
    location = resp.headers["Location"]
    assert location.startswith(uri + "?")
    assert form_source in resp.headers["Content-Security-Policy"]
    got = {"code": query_of(location)["code"], "verifier": verifier, "reg": reg}
    tokens = await oauth.exchange(got)
    assert tokens.status == 200, await tokens.text()


async def test_loopback_redirect_may_use_another_port(oauth: OAuth, account: Account) -> None:
    reg = await oauth.register(["http://127.0.0.1:8765/callback"])
    moved = Registered(reg.client_id, "http://127.0.0.1:50123/callback")
    got = await oauth.code_for(account, moved)
    assert (await oauth.exchange(got)).status == 200
    # The code is bound to the port actually used: the registered one does not redeem it.
    again = await oauth.code_for(account, moved)
    wrong = await oauth.exchange(again, redirect_uri="http://127.0.0.1:8765/callback")
    assert (await wrong.json())["error"] == "invalid_grant"


async def test_loopback_without_port_and_ipv6_and_localhost(oauth: OAuth) -> None:
    reg = await oauth.register(
        ["http://127.0.0.1/cb", "http://[::1]/cb?x=1", "http://localhost/cb"]
    )
    _, challenge = pkce()
    for uri in ("http://127.0.0.1:3000/cb", "http://[::1]:9/cb?x=1", "http://localhost:4444/cb"):
        params = authorize_params(Registered(reg.client_id, uri), challenge, oauth.resource)
        resp, html = await oauth.approval_page(params)
        assert resp.status == 303, (uri, html)  # valid: on to sign-in


@pytest.mark.parametrize(
    "asked",
    [
        "http://127.0.0.1:50123/other",  # path differs
        "http://127.0.0.1:50123/callback?x=1",  # query differs
        "http://localhost:50123/callback",  # host differs
        "https://127.0.0.1:50123/callback",  # scheme differs
        "http://127.0.0.1:50123/callback#f",
        "http://127.0.0.1:notaport/callback",
    ],
)
async def test_loopback_port_is_the_only_freedom(oauth: OAuth, asked: str) -> None:
    reg = await oauth.register(["http://127.0.0.1:8765/callback"])
    _, challenge = pkce()
    params = authorize_params(Registered(reg.client_id, asked), challenge, oauth.resource)
    resp, html = await oauth.approval_page(params)
    assert resp.status == 400
    assert "does not match the application" in html or "malformed" in html


async def test_https_redirect_port_is_exact(oauth: OAuth) -> None:
    reg = await oauth.register(["https://app.example.com:8443/cb"])
    _, challenge = pkce()
    moved = Registered(reg.client_id, "https://app.example.com:9443/cb")
    resp, _ = await oauth.approval_page(authorize_params(moved, challenge, oauth.resource))
    assert resp.status == 400


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("javascript:alert(1)", "javascript: scheme"),
        ("data:text/html,<h1>x</h1>", "data: scheme"),
        ("data:text/html;base64,PGgxPng8L2gxPg==", "data: scheme"),
        ("file:///etc/passwd", "file: scheme"),
        ("http://app.example.com/cb", "loopback"),
        ("https://app.example.com/cb#frag", "fragment"),
        ("cursor://anysphere.cursor-mcp/oauth/callback#x", "fragment"),
        ("com.example.app:", "target"),
        ("1app://cb", "absolute"),
    ],
)
async def test_refused_redirect_uris(oauth: OAuth, uri: str, words: str) -> None:
    resp = await oauth.http.post("/register", json={"redirect_uris": [uri]})
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_redirect_uri"
    assert words in answer["error_description"]


async def test_registration_echoes_what_clients_expect(oauth: OAuth) -> None:
    resp = await oauth.http.post(
        "/register", json={"redirect_uris": [CURSOR], "client_name": "Cursor"}
    )
    body = await resp.json()
    assert resp.status == 201
    assert body["grant_types"] == ["authorization_code", "refresh_token"]
    assert body["response_types"] == ["code"]
    assert body["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in body
    bad = await oauth.http.post(
        "/register", json={"redirect_uris": [CURSOR], "application_type": "desktop"}
    )
    assert (await bad.json())["error"] == "invalid_client_metadata"


@pytest.mark.parametrize("method", ["client_secret_post", "client_secret_basic"])
async def test_confidential_client_completes_the_flow(
    oauth: OAuth, account: Account, method: str
) -> None:
    reg = await oauth.register(token_endpoint_auth_method=method)
    secret = reg.body["client_secret"]
    assert reg.body["token_endpoint_auth_method"] == method
    assert reg.body["client_secret_expires_at"] == 0
    got = await oauth.code_for(account, reg)
    form = {
        "grant_type": "authorization_code",
        "code": got["code"],
        "redirect_uri": reg.redirect_uri,
        "code_verifier": got["verifier"],
    }
    # Without its secret the client is refused, and the code is not spent.
    missing = await oauth.http.post("/token", data={**form, "client_id": reg.client_id})
    assert missing.status == 401
    assert (await missing.json())["error"] == "invalid_client"
    wrong = await oauth.http.post(
        "/token", data={**form, "client_id": reg.client_id, "client_secret": secret + "x"}
    )
    assert wrong.status == 401
    if method == "client_secret_post":
        ok = await oauth.http.post(
            "/token", data={**form, "client_id": reg.client_id, "client_secret": secret}
        )
    else:
        basic = base64.b64encode(f"{reg.client_id}:{secret}".encode()).decode()
        ok = await oauth.http.post("/token", data=form, headers={"Authorization": f"Basic {basic}"})
    assert ok.status == 200, await ok.text()
    tokens = await ok.json()
    refreshed = await oauth.http.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"],
              "client_id": reg.client_id, "client_secret": secret},
    )  # fmt: skip
    assert refreshed.status == 200, await refreshed.text()
    revoked = await oauth.http.post(
        "/revoke", data={"token": tokens["refresh_token"], "client_id": reg.client_id}
    )
    assert revoked.status == 401  # revocation authenticates the client too


async def test_wrong_basic_credentials_name_the_scheme(oauth: OAuth) -> None:
    reg = await oauth.register(token_endpoint_auth_method="client_secret_basic")
    basic = base64.b64encode(f"{reg.client_id}:nope".encode()).decode()
    resp = await oauth.http.post(
        "/token",
        data={"grant_type": "refresh_token", "refresh_token": "x"},
        headers={"Authorization": f"Basic {basic}"},
    )
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Basic")


async def test_unknown_or_deleted_client_is_invalid_client(oauth: OAuth, account: Account) -> None:
    unknown = await oauth.token(
        grant_type="authorization_code", client_id="dyn_nobody", code="c", code_verifier="v" * 43
    )
    assert unknown.status == 401
    assert (await unknown.json())["error"] == "invalid_client"
    got = await oauth.code_for(account)
    tokens = await (await oauth.exchange(got)).json()
    await oauth.pool.execute("DELETE FROM oauth_clients WHERE client_id = $1", got["reg"].client_id)
    gone = await oauth.refresh(got, tokens["refresh_token"])
    assert gone.status == 401  # clients such as Claude register again on this answer
    assert (await gone.json())["error"] == "invalid_client"


async def test_authorize_without_scope_offers_every_scope(oauth: OAuth, account: Account) -> None:
    reg = await oauth.register()
    _, challenge = pkce()
    params = authorize_params(reg, challenge, oauth.resource, scope=None)
    await oauth.signin(account)
    resp, html = await oauth.approval_page(params)
    assert resp.status == 200, html
    assert 'value="workspaces:read"' in html and 'value="n8n:read"' in html


CORS_PATHS = [
    ("/register", "POST"),
    ("/token", "POST"),
    ("/revoke", "POST"),
    ("/.well-known/oauth-authorization-server", "GET"),
    ("/.well-known/oauth-protected-resource", "GET"),
    ("/.well-known/oauth-protected-resource/mcp", "GET"),
    ("/.well-known/jwks.json", "GET"),
]


@pytest.mark.parametrize(("path", "method"), CORS_PATHS)
async def test_cors_preflight(oauth: OAuth, path: str, method: str) -> None:
    resp = await oauth.http.options(
        path,
        headers={
            "Origin": "https://inspector.example",
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type, mcp-protocol-version",
        },
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert method in resp.headers["Access-Control-Allow-Methods"]
    assert "mcp-protocol-version" in resp.headers["Access-Control-Allow-Headers"].lower()
    assert "Access-Control-Allow-Credentials" not in resp.headers


async def test_cors_headers_on_answers_and_errors(oauth: OAuth) -> None:
    origin = {"Origin": "https://inspector.example"}
    answers: list[Any] = [
        await oauth.http.post("/register", json={"redirect_uris": [CURSOR]}, headers=origin),
        await oauth.http.post("/register", json={"redirect_uris": []}, headers=origin),
        await oauth.http.post("/token", data={"grant_type": "x"}, headers=origin),
        await oauth.http.post("/revoke", data={"token": "t", "client_id": "n"}, headers=origin),
        await oauth.http.get("/.well-known/oauth-authorization-server", headers=origin),
    ]
    assert [a.status for a in answers] == [201, 400, 400, 401, 200]
    assert all(a.headers.get("Access-Control-Allow-Origin") == "*" for a in answers)


@pytest.mark.parametrize("path", ["/signin", "/authorize", "/approvals"])
async def test_pages_stay_same_origin(oauth: OAuth, path: str) -> None:
    origin = {"Origin": "https://evil.example"}
    page = await oauth.http.get(path, headers=origin, allow_redirects=False)
    assert "Access-Control-Allow-Origin" not in page.headers
    preflight = await oauth.http.options(
        path, headers={**origin, "Access-Control-Request-Method": "POST"}
    )
    assert preflight.status == 405
    assert "Access-Control-Allow-Origin" not in preflight.headers


async def test_challenges(oauth: OAuth, account: Account) -> None:
    body, headers = mcp_tool_call("get_many_instances", {"workspaceId": account.workspaces[0]})
    metadata = (
        f'resource_metadata="{oauth.cfg.public_url}/.well-known/oauth-protected-resource/mcp"'
    )

    none = await oauth.http.post("/mcp", json=body, headers=headers)
    assert none.status == 401
    assert none.headers["WWW-Authenticate"] == (
        f'Bearer {metadata}, scope="workspaces:read n8n:read"'
    )
    bad = await oauth.http.post("/mcp", json=body, headers=bearer(headers, "not.a.token"))
    assert bad.status == 401
    assert 'error="invalid_token"' in bad.headers["WWW-Authenticate"]
    assert bad.headers["WWW-Authenticate"].startswith(f"Bearer {metadata}, ")

    got = await oauth.code_for(account, scope="workspaces:read")
    narrow = await (await oauth.exchange(got)).json()
    lacking = await oauth.http.post(
        "/mcp", json=body, headers=bearer(headers, narrow["access_token"])
    )
    assert lacking.status == 403
    challenge = lacking.headers["WWW-Authenticate"]
    assert 'error="insufficient_scope"' in challenge
    assert 'scope="n8n:read"' in challenge
