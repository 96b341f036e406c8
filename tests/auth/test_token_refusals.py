"""Refusals that cost almost nothing: a token that will be refused is refused before its
signature is checked whenever its header or claims already say so, with the refusal it
would get were it well signed; a token seen before is answered from memory (refused ones
until their answer could change, verified ones until they expire) without a signature
check; the memory is bounded; on the wire every refusal is still a 401 with the same
challenge and counted, while a flood of them logs a sample and one summary line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import aiohttp
import jwt
import pytest

from service.app_keys import DB_POOL, METRICS
from service.auth import tokens as tokens_module
from service.auth.tokens import (
    LEEWAY_SECONDS,
    MAX_TOKEN_CHARS,
    AccessClaims,
    TokenService,
)
from service.config import Config
from service.errors import InvalidToken
from service.observability.metrics.labels import PREFIX
from service.server.access_log import ACCESS, REFUSAL_LINES_PER_SECOND, RefusalSampler
from tests.auth.flow import bearer, seed_account, tool_call
from tests.auth.helpers import b64, sign, unverified
from tests.support.keys import ed25519_pem
from tests.support.server import InProcessServer
from tests.support.services import TestDatabase


@pytest.fixture
def signature_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tokens whose signature pyjwt verified (in this process) during the test."""
    checked: list[str] = []
    real = jwt.decode

    def counting(token: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("options", {}).get("verify_signature", True):
            checked.append(token)
        return real(token, *args, **kwargs)

    monkeypatch.setattr(jwt, "decode", counting)
    return checked


def _issue(tokens: TokenService, now: float | None = None) -> str:
    token, _ = tokens.issue_access_token(
        account_id=uuid.uuid4(), client_id="refusals", scopes=["n8n:read"],
        approval_id=uuid.uuid4(), generation=1, now=now,
    )  # fmt: skip
    return token


def _badly_signed(token: str) -> str:
    """The same header and claims under the signature of another key (our kid kept)."""
    header, claims = unverified(token)
    return sign(ed25519_pem(), claims, dict(header))


def _refusal(verify: Callable[[str], AccessClaims], token: str) -> tuple[str, str]:
    with pytest.raises(InvalidToken) as caught:
        verify(token)
    return caught.value.reason, caught.value.description


def _claims_changed(key_pem: bytes, token: str, **changes: Any) -> str:
    header, claims = unverified(token)
    return sign(key_pem, {**claims, **changes}, dict(header))


def _without(key_pem: bytes, token: str, name: str) -> str:
    header, claims = unverified(token)
    return sign(key_pem, {k: v for k, v in claims.items() if k != name}, dict(header))


# Defects a well-signed token can have, each as a function of (our key, a good token).
DEFECTS: dict[str, Callable[[bytes, str, Config], str]] = {
    "expired": lambda k, t, c: _claims_changed(k, t, iat=_now() - 400, nbf=_now() - 400,
                                               exp=_now() - 100),
    "nbf in the future": lambda k, t, c: _claims_changed(k, t, nbf=_now() + 120),
    "iat in the future": lambda k, t, c: _claims_changed(k, t, iat=_now() + 120),
    "lifetime of a day": lambda k, t, c: _claims_changed(k, t, exp=_now() + 86400),
    "exp not a number": lambda k, t, c: _claims_changed(k, t, exp="soon"),
    "wrong audience": lambda k, t, c: _claims_changed(k, t, aud=c.issuer),
    "audience list": lambda k, t, c: _claims_changed(k, t, aud=[c.mcp_resource]),
    "empty audience": lambda k, t, c: _claims_changed(k, t, aud=""),
    "wrong issuer": lambda k, t, c: _claims_changed(k, t, iss="https://evil.example"),
    "missing approval": lambda k, t, c: _without(k, t, "approval_id"),
    "sub not a uuid": lambda k, t, c: _claims_changed(k, t, sub="alice"),
    "generation a string": lambda k, t, c: _claims_changed(k, t, approval_gen="1"),
}  # fmt: skip


def _now() -> int:
    return int(time.time())


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_a_refusal_before_the_signature_is_the_one_after_it(
    config: Config,
    signature_checks: list[str],
    monkeypatch: pytest.MonkeyPatch,
    defect: str,
) -> None:
    tokens = TokenService(config)
    well_signed = DEFECTS[defect](config.signing_key_pem, _issue(tokens), config)
    forged = _badly_signed(well_signed)
    before = _refusal(tokens.verify, forged)
    assert signature_checks == []  # refused on its claims alone
    # What the well-signed token gets when only pyjwt and the checks after it decide.
    monkeypatch.setattr(TokenService, "_check_claims", lambda self, claims, now: None)
    assert _refusal(tokens.verify, well_signed) == before
    assert signature_checks == [well_signed]


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("abc.def.ghi", "malformed"),
        ("", "malformed"),
        ("a.b", "malformed"),
        ("a.b.c.d", "malformed"),
        (b64(b'{"alg":"EdDSA","kid":"x"}') + ".e30.c2ln", "signature"),
        (b64(b"[1]") + ".e30.c2ln", "malformed"),
        ("e30+.e30.c2ln", "malformed"),  # base64, not base64url
        ("x" * (MAX_TOKEN_CHARS + 1), "malformed"),
        ("ümlaut.e30.c2ln", "malformed"),
    ],
)
def test_garbage_is_refused_without_a_signature_check(
    tokens: TokenService, signature_checks: list[str], token: str, reason: str
) -> None:
    for _ in range(3):
        assert _refusal(tokens.verify_remembered, token)[0] == reason
    assert signature_checks == []


def test_a_header_we_never_sign_with_is_refused_before_the_signature(
    config: Config, signature_checks: list[str]
) -> None:
    tokens = TokenService(config)
    header, claims = unverified(_issue(tokens))
    unknown_kid = sign(ed25519_pem(), claims, {**header, "kid": "not-a-key-we-know"})
    assert _refusal(tokens.verify, unknown_kid) == (
        "signature",
        "The access token was not signed by a known key",
    )
    other_typ = sign(config.signing_key_pem, claims, {**header, "typ": "JWT"})
    assert _refusal(tokens.verify, other_typ)[0] == "malformed"
    assert signature_checks == []


def test_a_token_refused_once_is_refused_again_without_a_signature_check(
    tokens: TokenService, signature_checks: list[str]
) -> None:
    forged = _badly_signed(_issue(tokens))  # claims fine: only the signature says no
    first = _refusal(tokens.verify_remembered, forged)
    assert first == ("signature", "The access token signature is invalid")
    for _ in range(5):
        assert _refusal(tokens.verify_remembered, forged) == first
    assert signature_checks == [forged]


def test_a_verified_token_is_accepted_again_without_a_signature_check_until_it_expires(
    tokens: TokenService, signature_checks: list[str]
) -> None:
    token = _issue(tokens)
    claims = tokens.verify_remembered(token)
    for _ in range(5):
        assert tokens.verify_remembered(token) == claims
    assert signature_checks == [token]
    # Past its expiry the memory no longer answers: the token is checked again.
    tokens.verify_remembered(token, now=claims.expires_at + LEEWAY_SECONDS)
    assert signature_checks == [token, token]


def test_a_refusal_is_remembered_only_while_it_is_the_answer(
    tokens: TokenService, signature_checks: list[str]
) -> None:
    # A token refused as not valid yet becomes valid: its refusal is forgotten by then.
    early = _issue(tokens, now=time.time() + LEEWAY_SECONDS + 1)
    assert _refusal(tokens.verify_remembered, early)[0] == "expired"
    time.sleep(1.2)
    assert tokens.verify_remembered(early).jti == unverified(early)[1]["jti"]
    # A badly signed token is refused as such until it would be expired: then its
    # refusal is no longer answered from memory.
    forged = _badly_signed(_issue(tokens))
    _refusal(tokens.verify_remembered, forged)
    exp = unverified(forged)[1]["exp"]
    _refusal(lambda t: tokens.verify_remembered(t, now=exp + LEEWAY_SECONDS - 1), forged)
    assert signature_checks.count(forged) == 1
    _refusal(lambda t: tokens.verify_remembered(t, now=exp + LEEWAY_SECONDS), forged)
    assert signature_checks.count(forged) == 2


def test_the_memory_of_refusals_is_bounded_and_spares_verified_tokens(
    tokens: TokenService, signature_checks: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tokens_module, "_REFUSED_MAX", 3)
    good = _issue(tokens)
    tokens.verify_remembered(good)
    forged = [_badly_signed(_issue(tokens)) for _ in range(4)]
    for token in forged:
        _refusal(tokens.verify_remembered, token)
    _refusal(tokens.verify_remembered, forged[-1])  # remembered
    assert signature_checks == [good, *forged]
    _refusal(tokens.verify_remembered, forged[0])  # the oldest, pushed out
    assert signature_checks == [good, *forged, forged[0]]
    tokens.verify_remembered(good)  # a flood of refusals never evicts a verified token
    assert signature_checks.count(good) == 1


# ---- on the wire ------------------------------------------------------------------------


async def _call(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, str, str]:
    """(status, the challenge's error_description, the JSON-RPC error message or "")."""
    body, headers = tool_call("get_many_workspaces", {"limit": 5})
    async with http.post(url, json=body, headers=bearer(headers, token)) as resp:
        answer = await resp.json()
        challenge = resp.headers.get("WWW-Authenticate", "")
        described = challenge.partition('error_description="')[2].partition('"')[0]
        return resp.status, described, answer.get("error", {}).get("message", "")


async def test_refusals_on_the_wire_are_unchanged(
    test_database: TestDatabase, signature_checks: list[str]
) -> None:
    async with InProcessServer(test_database.dsn) as server:
        cfg = server.config()
        tokens = TokenService(cfg)
        account = await seed_account(server.apps[0][DB_POOL], workspaces=1)
        issued = await server.approve(account=account.email, workspaces=account.workspaces)
        expired = _issue(tokens, now=time.time() - 3600)
        forged = _badly_signed(issued.access_token)
        header, claims = unverified(issued.access_token)
        unknown_kid = sign(ed25519_pem(), claims, {**header, "kid": "not-a-key-we-know"})
        expected = {
            expired: f"The access token has expired: refresh it at {cfg.issuer}/token",
            forged: "The access token signature is invalid",
            unknown_kid: "The access token was not signed by a known key",
            "abc.def.ghi": "The access token is malformed",
        }
        async with aiohttp.ClientSession() as http:
            for _ in range(3):
                for token, description in expected.items():
                    assert await _call(http, server.mcp_url, token) == (
                        401,
                        description,
                        description,
                    )
                status, _, _ = await _call(http, server.mcp_url, issued.access_token)
                assert status == 200
        # Over three rounds, one signature check for the badly signed token and one for the
        # good one; none for the expired, unknown-kid and garbage tokens.
        assert sorted(signature_checks) == sorted([forged, issued.access_token])
        registry = server.apps[0][METRICS].registry
        for reason, count in (("expired", 3), ("signature", 6), ("malformed", 3)):
            value = registry.get_sample_value(f"{PREFIX}_auth_failures_total", {"reason": reason})
            assert value == count


async def test_a_flood_of_refusals_logs_a_sample_and_counts_every_one(
    test_database: TestDatabase, access_lines: io.StringIO
) -> None:
    flood = 3 * REFUSAL_LINES_PER_SECOND
    async with InProcessServer(test_database.dsn) as server:
        expired = _issue(TokenService(server.config()), now=time.time() - 3600)
        started = time.monotonic()
        async with aiohttp.ClientSession() as http:
            for _ in range(flood):
                assert (await _call(http, server.mcp_url, expired))[0] == 401
        seconds = time.monotonic() - started
        await asyncio.sleep(1.2)  # the flood's last second ends: its summary is logged
        registry = server.apps[0][METRICS].registry
        counted = registry.get_sample_value(f"{PREFIX}_auth_failures_total", {"reason": "expired"})
        assert counted == flood
    lines = [json.loads(line) for line in access_lines.getvalue().splitlines()]
    refusals = [line for line in lines if line.get("status") == 401]
    summaries = [line for line in lines if line.get("event") == "http_refusals_suppressed"]
    info = [line for line in refusals if line["level"] == "info"]
    debug = [line for line in refusals if line["level"] == "debug"]
    assert len(info) + len(debug) == flood  # every refusal still has its line, most at DEBUG
    assert len(info) <= REFUSAL_LINES_PER_SECOND * (int(seconds) + 1)
    assert debug
    assert sum(s["suppressed"] for s in summaries) == len(debug)
    assert sum(s["by_status"]["401"] for s in summaries) == len(debug)
    assert all(s["level"] == "info" and "request_id" not in s for s in summaries)
    assert summaries[0]["message"] == f"{summaries[0]['suppressed']} similar refusals suppressed"


def test_the_sampler_admits_a_few_refusals_a_second_and_sums_up_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [100.0]
    sampler = RefusalSampler(per_second=2, clock=lambda: clock[0])
    with caplog.at_level(logging.INFO, logger=ACCESS.name):
        assert [sampler.admit(status) for status in (401, 401, 401, 403, 401)] == [
            True, True, False, False, False,
        ]  # fmt: skip
        assert caplog.records == []
        clock[0] += 1.0  # the next second: the last one's summary first
        assert sampler.admit(401)
        (summary,) = caplog.records
        assert summary.getMessage() == "3 similar refusals suppressed"
        assert summary.__dict__["by_status"] == {"401": 2, "403": 1}
        sampler.flush()  # nothing suppressed since: nothing more to say
        assert len(caplog.records) == 1
