"""The bearer check's memo of verified access tokens: a token verified once is not verified
again until it expires; a token that failed is remembered as refused, never as verified (the
floods issue: a repeated bad token costs a lookup); an expired one is refused even after it
was remembered; two token services (two keys) never share entries."""

from __future__ import annotations

import time
import uuid

import pytest

from service.auth.bearer import verified_claims
from service.auth.tokens import LEEWAY_SECONDS, AccessClaims, TokenService
from service.config import Config
from service.errors import InvalidToken
from tests.support.keys import ed25519_pem


def issue(tokens: TokenService, now: float | None = None) -> str:
    token, _ = tokens.issue_access_token(
        account_id=uuid.uuid4(), client_id="memo", scopes=["n8n:read"],
        approval_id=uuid.uuid4(), generation=1, now=now,
    )  # fmt: skip
    return token


class Counting(TokenService):
    calls = 0

    def verify(self, token: str) -> AccessClaims:
        self.calls += 1
        return super().verify(token)


def test_a_verified_token_is_remembered_until_it_expires(config: Config) -> None:
    tokens = Counting(config)
    token = issue(tokens)
    first = verified_claims(tokens, token)
    assert verified_claims(tokens, token) == first
    assert tokens.calls == 1
    # past its expiry (and the leeway) the memo no longer answers: the token is verified
    # again, and that verification (with the real clock) decides
    verified_claims(tokens, token, now=first.expires_at + LEEWAY_SECONDS)
    assert tokens.calls == 2
    verified_claims(tokens, token, now=first.expires_at + LEEWAY_SECONDS - 1)
    assert tokens.calls == 2


def test_expired_and_tampered_tokens_are_remembered_as_refused(config: Config) -> None:
    tokens = Counting(config)
    old = issue(tokens, now=time.time() - 3600)
    for _ in range(2):
        with pytest.raises(InvalidToken) as expired:
            verified_claims(tokens, old)
        assert expired.value.reason == "expired"
    good = issue(tokens)
    tampered = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    for _ in range(2):
        with pytest.raises(InvalidToken) as forged:
            verified_claims(tokens, tampered)
        assert forged.value.reason == "signature"
    assert tokens.calls == 2  # each refused once; the second sight is a lookup


def test_another_signing_key_does_not_see_the_memo(config: Config) -> None:
    tokens = TokenService(config)
    token = issue(tokens)
    verified_claims(tokens, token)
    other = TokenService(
        Config.from_env({**_env(config), "ELOVA_SIGNING_KEY": ed25519_pem().decode()})
    )
    with pytest.raises(InvalidToken):
        verified_claims(other, token)


def _env(config: Config) -> dict[str, str]:
    return {
        "ELOVA_DATABASE_URL": config.database_url,
        "ELOVA_PUBLIC_URL": config.public_url,
        "ELOVA_SIGNING_KEY": config.signing_key_pem.decode(),
    }
