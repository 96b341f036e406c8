"""Discovery documents over HTTP: RFC 9728 resource metadata at both paths, and the JWKS
that verifies the service's tokens."""

from __future__ import annotations

import jwt
import pytest

from service.auth.tokens import TokenService
from tests.auth.helpers import AuthApp, unbacked_token


@pytest.mark.parametrize(
    "path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"]
)
async def test_protected_resource_metadata(auth_app: AuthApp, path: str) -> None:
    resp = await auth_app.client.get(path)
    assert resp.status == 200
    assert resp.content_type == "application/json"
    assert resp.headers["Access-Control-Allow-Origin"] == "*"
    assert await resp.json() == {
        "resource": "http://127.0.0.1:8080/mcp",
        "authorization_servers": ["http://127.0.0.1:8080"],
        "scopes_supported": ["workspaces:read", "n8n:read"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Elova",
    }


async def test_jwks_verifies_an_issued_token(auth_app: AuthApp, tokens: TokenService) -> None:
    resp = await auth_app.client.get("/.well-known/jwks.json")
    assert resp.status == 200
    keys = (await resp.json())["keys"]
    assert len(keys) == 1
    assert all("d" not in k for k in keys)
    token, _ = unbacked_token(tokens)
    # A third party with only the JWKS can verify the token (as RFC 9068 intends).
    jwk = jwt.PyJWK.from_dict(keys[0])
    assert jwt.get_unverified_header(token)["kid"] == keys[0]["kid"]
    claims = jwt.decode(
        token, jwk, algorithms=[keys[0]["alg"]], audience="http://127.0.0.1:8080/mcp"
    )
    assert claims["iss"] == "http://127.0.0.1:8080"
