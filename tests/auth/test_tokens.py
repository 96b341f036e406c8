"""Access tokens over HTTP: a valid one passes; every forged or out-of-bounds one is a 401
with a challenge that names the resource metadata, and the failure is counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import pytest
from cryptography.hazmat.primitives import serialization

from service.auth.approvals import IssuedTokens
from service.auth.signing_keys import jwk_thumbprint
from service.auth.tokens import TokenService
from service.config import Config
from tests.auth.helpers import (
    AuthApp,
    SeedFn,
    hs256,
    now,
    sign,
    unbacked_token,
    unsigned,
    unverified,
)
from tests.support.approvals import granted
from tests.support.keys import ed25519_pem, p256_pem

METADATA = 'resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"'


@pytest.fixture
async def issued(db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn) -> IssuedTokens:
    who = await seed(2)
    _, out = await granted(db_pool, tokens, who)
    return out


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_valid_token_passes(auth_app: AuthApp, issued: IssuedTokens) -> None:
    resp = await auth_app.client.get("/mcp", headers=_bearer(issued.access_token))
    assert resp.status == 200
    body = await resp.json()
    assert body["approval"] == str(issued.approval_id)
    assert body["scopes"] == ["n8n:read", "workspaces:read"]
    assert auth_app.metrics.auth_failures == []
    assert [c[0] for c in auth_app.metrics.db_calls] == ["auth"]


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
async def test_scheme_is_case_insensitive(
    auth_app: AuthApp, issued: IssuedTokens, scheme: str
) -> None:
    headers = {"Authorization": f"{scheme} {issued.access_token}"}
    assert (await auth_app.client.get("/mcp", headers=headers)).status == 200


def _forge(
    kind: str, cfg: Config, token: str
) -> tuple[str, str]:  # (forged token, expected metrics reason)
    header, claims = unverified(token)
    key_pem = cfg.signing_key_pem
    t = now()

    def ours(**changes: Any) -> str:
        return sign(key_pem, {**claims, **changes}, dict(header))

    public_pem = (
        serialization.load_pem_private_key(key_pem, None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    forged: dict[str, Callable[[], tuple[str, str]]] = {
        "alg none": lambda: (unsigned(claims, {**header, "alg": "none"}), "signature"),
        "alg none without kid": lambda: (unsigned(claims, {"alg": "none"}), "signature"),
        "HS256 keyed with the public key": lambda: (hs256(public_pem, claims, header), "signature"),
        "unknown kid": lambda: (
            sign(ed25519_pem(), claims, {**header, "kid": "not-a-key-we-know"}),
            "signature",
        ),
        "another key claiming our kid": lambda: (
            sign(ed25519_pem(), claims, dict(header)),
            "signature",
        ),
        "ES256 header on our EdDSA kid": lambda: (
            sign(p256_pem(), claims, {**header, "alg": "ES256"}),
            "signature",
        ),
        "tampered payload": lambda: (_tamper(token), "signature"),
        "expired": lambda: (ours(iat=t - 400, nbf=t - 400, exp=t - 100), "expired"),
        "nbf in the future": lambda: (ours(iat=t, nbf=t + 120, exp=t + 300), "expired"),
        "iat in the future": lambda: (ours(iat=t + 120, nbf=t, exp=t + 300), "expired"),
        "lifetime over five minutes": lambda: (ours(iat=t, nbf=t, exp=t + 301), "expired"),
        "lifetime of a day": lambda: (ours(iat=t, nbf=t, exp=t + 86400), "expired"),
        "wrong audience": lambda: (ours(aud="http://127.0.0.1:8080/other"), "audience"),
        "audience of the issuer": lambda: (ours(aud=cfg.issuer), "audience"),
        "audience list with ours": lambda: (ours(aud=[cfg.mcp_resource, "x"]), "audience"),
        "wrong issuer": lambda: (ours(iss="https://evil.example"), "issuer"),
        "missing exp": lambda: (sign(key_pem, _without(claims, "exp"), dict(header)), "malformed"),
        "missing approval": lambda: (
            sign(key_pem, _without(claims, "approval_id"), dict(header)),
            "malformed",
        ),
        "not an access token typ": lambda: (
            sign(key_pem, claims, {**header, "typ": "JWT"}),
            "malformed",
        ),
        "garbage": lambda: ("abc.def.ghi", "malformed"),
    }
    return forged[kind]()


ATTACKS = [
    "alg none",
    "alg none without kid",
    "HS256 keyed with the public key",
    "unknown kid",
    "another key claiming our kid",
    "ES256 header on our EdDSA kid",
    "tampered payload",
    "expired",
    "nbf in the future",
    "iat in the future",
    "lifetime over five minutes",
    "lifetime of a day",
    "wrong audience",
    "audience of the issuer",
    "audience list with ours",
    "wrong issuer",
    "missing exp",
    "missing approval",
    "not an access token typ",
    "garbage",
]


def _without(claims: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in claims.items() if k != name}


def _tamper(token: str) -> str:
    import base64
    import json

    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims["scope"] = "workspaces:read n8n:read admin"
    claims["sub"] = "00000000-0000-0000-0000-000000000001"
    new_body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{new_body}.{sig}"


@pytest.mark.parametrize("attack", ATTACKS)
async def test_attack_is_refused(
    auth_app: AuthApp, issued: IssuedTokens, config: Config, attack: str
) -> None:
    token, reason = _forge(attack, config, issued.access_token)
    resp = await auth_app.client.get("/mcp", headers=_bearer(token))
    assert resp.status == 401
    challenge = resp.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert METADATA in challenge
    assert 'error="invalid_token"' in challenge
    assert auth_app.metrics.auth_failures == [reason]
    assert auth_app.metrics.db_calls == []  # refused before touching the database


@pytest.mark.parametrize(
    ("headers", "query", "reason", "error"),
    [
        ({}, "", "missing", None),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, "", "malformed", "invalid_request"),
        ({"Authorization": "Bearer"}, "", "malformed", "invalid_token"),
        ({"Authorization": "Bearer a b"}, "", "malformed", "invalid_token"),
        ({"Authorization": "Bearer ümlaut"}, "", "malformed", "invalid_token"),
    ],
)
async def test_missing_or_malformed_credentials(
    auth_app: AuthApp, headers: dict[str, str], query: str, reason: str, error: str | None
) -> None:
    resp = await auth_app.client.get("/mcp" + query, headers=headers)
    assert resp.status == 401
    assert METADATA in resp.headers["WWW-Authenticate"]
    if error is None:  # no credentials at all: no error code (RFC 6750 §3.1), every scope
        assert "error" not in resp.headers["WWW-Authenticate"]
        assert 'scope="workspaces:read n8n:read"' in resp.headers["WWW-Authenticate"]
    else:
        assert f'error="{error}"' in resp.headers["WWW-Authenticate"]
    assert auth_app.metrics.auth_failures == [reason]


async def test_token_in_query_string_is_refused(auth_app: AuthApp, issued: IssuedTokens) -> None:
    alone = await auth_app.client.get("/mcp", params={"access_token": issued.access_token})
    assert alone.status == 401
    # Even beside a valid header: a token in a URL leaks into logs and must not be used.
    both = await auth_app.client.get(
        "/mcp", params={"access_token": issued.access_token}, headers=_bearer(issued.access_token)
    )
    assert both.status == 401
    assert 'error="invalid_request"' in both.headers["WWW-Authenticate"]


async def test_previous_key_still_verifies_and_kid_is_the_jwk_thumbprint(
    make_config: Callable[..., Config], tmp_path: Any
) -> None:
    old_pem = p256_pem()
    old_cfg = make_config(SIGNING_KEY=old_pem.decode())
    old = TokenService(old_cfg)
    token, expires_in = unbacked_token(old)
    assert expires_in == 300
    assert unverified(token)[0]["alg"] == "ES256"
    path = tmp_path / "old.pem"
    path.write_bytes(old_pem)
    rotated = TokenService(make_config(PREVIOUS_SIGNING_KEY_FILES=str(path)))
    assert rotated.verify(token).scopes == frozenset({"n8n:read"})
    keys = rotated.jwks()["keys"]
    assert [k["alg"] for k in keys] == ["EdDSA", "ES256"]
    for key in keys:
        assert "d" not in key  # public halves only
        members = {m: key[m] for m in ("crv", "kty", "x", "y") if m in key}
        assert key["kid"] == jwk_thumbprint(members)


def test_rfc7638_thumbprint_of_a_known_key() -> None:
    # RFC 8037 appendix A.3: the thumbprint of its Ed25519 example key.
    members = {"crv": "Ed25519", "kty": "OKP", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}
    assert jwk_thumbprint(members) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_token_never_outlives_what_backs_it(tokens: TokenService) -> None:

    t = now()
    token, expires_in = unbacked_token(tokens, not_after=t + 42, now=t)
    assert expires_in == 42
    claims = unverified(token)[1]
    assert claims["exp"] - claims["iat"] == 42


async def test_two_authorization_headers_are_refused(
    auth_app: AuthApp, issued: IssuedTokens
) -> None:
    from multidict import CIMultiDict

    headers = CIMultiDict([("Authorization", f"Bearer {issued.access_token}")] * 2)
    resp = await auth_app.client.get("/mcp", headers=headers)
    assert resp.status == 401
    assert 'error="invalid_request"' in resp.headers["WWW-Authenticate"]
