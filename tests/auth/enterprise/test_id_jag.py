"""ID-JAG checks that need a hand-made token: a signed NaN `exp` (json reads it) and a
key of another family under the header's `kid` are refused, never a 500."""

from __future__ import annotations

import base64
import time

import jwt
import pytest

from service.auth.enterprise.id_jag import read_id_jag
from service.errors import OAuthError
from tests.auth.enterprise.idp import ed25519_key, rsa_key

AUD = "https://as.example"
HEADER = {"typ": "oauth-id-jag+jwt", "kid": "k1"}


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


async def _read(token: str, key: jwt.PyJWK) -> None:
    async def key_of(issuer: str, kid: str) -> jwt.PyJWK:
        return key

    await read_id_jag(token, key_of, our_issuer=AUD, resource_ok=lambda sent: True)


async def test_a_signed_nan_exp_is_refused() -> None:
    key = ed25519_key("k1")
    head = jwt.encode({}, key.private, algorithm="EdDSA", headers=HEADER).split(".")[0]
    body = _b64(b'{"iss":"https://i","sub":"s","aud":"%s","client_id":"c","jti":"j",'
                b'"iat":NaN,"exp":NaN}' % AUD.encode())  # fmt: skip
    signature = _b64(key.private.sign(f"{head}.{body}".encode()))
    with pytest.raises(OAuthError, match="no exp") as refused:
        await _read(f"{head}.{body}.{signature}", jwt.PyJWK(key.public_jwk()))
    assert refused.value.error == "invalid_grant"


async def test_a_key_of_another_family_is_refused() -> None:
    now = int(time.time())
    claims = {"iss": "https://i", "sub": "s", "aud": AUD, "client_id": "c", "jti": "j",
              "iat": now, "exp": now + 60}  # fmt: skip
    token = jwt.encode(claims, rsa_key("k1").private, algorithm="RS256", headers=HEADER)
    with pytest.raises(OAuthError) as refused:
        await _read(token, jwt.PyJWK(ed25519_key("k1").public_jwk()))
    assert refused.value.error == "invalid_grant"
