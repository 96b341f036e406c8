"""Dynamic client registration (RFC 7591): public clients only, redirect URI rules, errors
with descriptions; and the authorization-server metadata that names every endpoint."""

from __future__ import annotations

from typing import Any

import pytest

from tests.auth.browser_flow import OAuth


async def test_metadata_names_every_endpoint(oauth: OAuth) -> None:
    resp = await oauth.http.get("/.well-known/oauth-authorization-server")
    assert resp.status == 200
    meta = await resp.json()
    base = oauth.cfg.issuer
    assert meta["issuer"] == base
    assert meta["authorization_endpoint"] == base + "/authorize"
    assert meta["token_endpoint"] == base + "/token"
    assert meta["registration_endpoint"] == base + "/register"
    assert meta["revocation_endpoint"] == base + "/revoke"
    assert meta["jwks_uri"] == base + "/.well-known/jwks.json"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["token_endpoint_auth_methods_supported"] == [
        "none",
        "client_secret_post",
        "client_secret_basic",
    ]
    assert meta["client_id_metadata_document_supported"] is True
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["response_types_supported"] == ["code"]
    assert set(meta["scopes_supported"]) == {"workspaces:read", "n8n:read"}
    prm = await (await oauth.http.get("/.well-known/oauth-protected-resource/mcp")).json()
    assert prm["authorization_servers"] == [base]


@pytest.mark.parametrize(
    "uri",
    [
        "https://app.example.com/oauth/callback",
        "http://127.0.0.1:9999/callback",
        "http://localhost/cb",
        "http://[::1]:8000/cb?x=1",
    ],
)
async def test_accepted_redirect_uris(oauth: OAuth, uri: str) -> None:
    reg = await oauth.register([uri])
    assert reg.body["redirect_uris"] == [uri]
    assert reg.body["token_endpoint_auth_method"] == "none"
    assert "client_secret" not in reg.body
    assert reg.body["client_name"] == "Test Agent"
    assert set(reg.body["grant_types"]) == {"authorization_code", "refresh_token"}


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        ({"redirect_uris": ["http://app.example.com/cb"]}, "invalid_redirect_uri", "loopback"),
        (
            {"redirect_uris": ["https://app.example.com/cb#frag"]},
            "invalid_redirect_uri",
            "fragment",
        ),
        ({"redirect_uris": ["/relative"]}, "invalid_redirect_uri", "https"),
        ({"redirect_uris": ["https://u:p@app.example.com/cb"]}, "invalid_redirect_uri", "user"),
        ({"redirect_uris": []}, "invalid_redirect_uri", "at least one"),
        ({"client_name": "no uris"}, "invalid_redirect_uri", "at least one"),
        (
            {
                "redirect_uris": ["https://a.example/cb"],
                "token_endpoint_auth_method": "private_key_jwt",
            },
            "invalid_client_metadata",
            "token_endpoint_auth_method",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "grant_types": ["implicit"]},
            "invalid_client_metadata",
            "grant_types",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "response_types": ["token"]},
            "invalid_client_metadata",
            "response_types",
        ),
        (
            {"redirect_uris": ["https://a.example/cb"], "scope": "admin"},
            "invalid_client_metadata",
            "unknown scope admin",
        ),
        ({"redirect_uris": "https://a.example/cb"}, "invalid_client_metadata", "redirect_uris"),
    ],
)
async def test_refused_metadata(oauth: OAuth, body: dict[str, Any], error: str, words: str) -> None:
    resp = await oauth.http.post("/register", json=body)
    assert resp.status == 400
    assert resp.headers["Cache-Control"] == "no-store"
    answer = await resp.json()
    assert answer["error"] == error
    assert words in answer["error_description"]


async def test_not_json_is_refused(oauth: OAuth) -> None:
    resp = await oauth.http.post(
        "/register", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert (await resp.json())["error"] == "invalid_client_metadata"
    resp = await oauth.http.post("/register", data={"redirect_uris": "https://a.example/cb"})
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid_client_metadata"


async def test_unknown_fields_are_ignored_and_name_is_cleaned(oauth: OAuth) -> None:
    # control characters are cleaned; NUL is refused outright (tests/hostile/test_bad_bytes.py)
    reg = await oauth.register(client_name="Bad\x07\x1bName" + "x" * 190, frobnicate=True)
    assert reg.body["client_name"].startswith("Bad\ufffd\ufffdName")
    assert len(reg.body["client_name"]) == 199
    assert "frobnicate" not in reg.body
    # A name over its bound of 200 characters is refused, naming the field (no longer cut).
    resp = await oauth.http.post(
        "/register", json={"redirect_uris": ["https://a.example/cb"], "client_name": "x" * 201}
    )
    assert resp.status == 400
    answer = await resp.json()
    assert answer["error"] == "invalid_client_metadata"
    assert "client_name" in answer["error_description"]
