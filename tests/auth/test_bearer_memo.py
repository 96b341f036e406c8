"""The bearer check's memo of verified access tokens: a token verified once is not verified
again until it expires; a token that failed is remembered as refused, never as verified (the
floods issue: a repeated bad token costs a lookup); an expired one is refused even after it
was remembered; a long one is remembered by its digest; two token services (two keys)
never share entries. The token alphabet check agrees with RFC 6750's b64token."""

from __future__ import annotations

import random
import re
import time
import uuid

import pytest

from service.auth.bearer import is_b64token, verified_claims
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


def test_a_long_refused_token_is_remembered_by_its_digest(config: Config) -> None:
    tokens = Counting(config)
    long = issue(tokens, now=time.time() - 3600)
    header, claims, signature = long.split(".")
    # 2000 characters: longer than the tokens a refusal is kept under as they are (1024)
    long = f"{header}.{claims}.{signature}{'A' * (2000 - len(long))}"
    for _ in range(2):
        with pytest.raises(InvalidToken):
            verified_claims(tokens, long)
    assert tokens.calls == 1


# RFC 6750 §2.1: b64token = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


@pytest.mark.parametrize(
    "token",
    ["a", "a==", "A-._~+/9", "=", "===", "", "a=b", "a b", "a\tb", "ümlaut", "a\x00", "a%20",
     "a\n", "ab==c", "ab==="],
)  # fmt: skip
def test_the_token_alphabet_is_rfc_6750s_b64token(token: str) -> None:
    assert is_b64token(token) == bool(_B64TOKEN.fullmatch(token))


def test_the_token_alphabet_agrees_with_the_grammar_on_random_strings() -> None:
    pick = random.Random(6750)
    letters = "aZ09-._~+/= \t\x00é\u2028%\n"
    for _ in range(20_000):
        token = "".join(pick.choice(letters) for _ in range(pick.randint(0, 8)))
        assert is_b64token(token) == bool(_B64TOKEN.fullmatch(token)), repr(token)


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
