"""Access tokens (signed JWTs, RFC 9068), their verification and the JWKS. The signing keys are
in service/auth/signing_keys.py, the opaque refresh tokens in service/auth/refresh_tokens.py.

`TokenService` signs with the configured key (Ed25519 → EdDSA, EC P-256 → ES256) tokens of
at most five minutes that carry the approval id and generation; keys from a rotation stay
verification-only. `verify` refuses on the unverified token first and accepts only through
pyjwt's verification; `verify_remembered` answers a token seen before from memory. The
claims and checks: docs/decisions/auth.md, "Tokens"; why the order and the memories, with
their costs: "Refusals before the signature".
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import jwt

from service.auth.signing_keys import SigningKey, load_signing_key
from service.config import Config
from service.crypto import b64url
from service.errors import InvalidToken
from service.rules.identifiers import parse_id

MAX_ACCESS_TOKEN_SECONDS = 300
LEEWAY_SECONDS = 5
_VERIFIED_MAX = 4096  # remembered verified tokens per TokenService (a few MB at most)
# Remembered refusals per TokenService, apart from the verified tokens so that a flood of bad
# tokens never pushes out a client's good one. Keyed by the token itself up to
# _REFUSED_KEY_CHARS (hashing a 600-character token with SHA-256 cost more than the rest of a
# remembered refusal), by its SHA-256 beyond: an entry stays under about 1.5 KB whatever its
# token's size (about 6 MB at the cap).
_REFUSED_MAX = 4096
_REFUSED_KEY_CHARS = 1024
# How long a refusal is kept when no time of its token can change it (expired, garbage).
_REFUSED_SECONDS = 60
# Ours stay under 1 KB (client ids are at most 200 characters); longer is refused unread.
MAX_TOKEN_CHARS = 4096
TOKEN_TYPE = "at+jwt"

# Claim names beyond the registered ones (RFC 9068 uses client_id and scope as well).
APPROVAL_CLAIM = "approval_id"
GENERATION_CLAIM = "approval_gen"
_REQUIRED = ["iss", "aud", "sub", "exp", "iat", "nbf", "jti", "client_id", "scope"]
_REQUIRED += [APPROVAL_CLAIM, GENERATION_CLAIM]

_K = TypeVar("_K")
_V = TypeVar("_V")
_B64URL = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@dataclass(frozen=True, slots=True)
class AccessClaims:
    """The verified claims the bearer check needs."""

    account_id: uuid.UUID
    client_id: str
    scopes: frozenset[str]
    approval_id: uuid.UUID
    generation: int
    expires_at: int
    jti: str


@dataclass(frozen=True, slots=True)
class _Refusal:
    """A remembered refusal: what was raised, and until when (Unix time) it is the answer."""

    description: str
    reason: str
    error: str
    until: float

    def raised(self) -> InvalidToken:
        # a new exception each time: raising one instance again would grow its traceback
        return InvalidToken(self.description, reason=self.reason, error=self.error)


class TokenService:
    """Issues and verifies access tokens for one issuer and one MCP resource."""

    def __init__(self, cfg: Config) -> None:
        if not cfg.signing_key_pem:
            raise ValueError("a signing key is required to issue or verify access tokens")
        self._issuer = cfg.issuer
        self._audience = cfg.mcp_resource
        self._ttl = min(cfg.access_token_ttl_seconds, MAX_ACCESS_TOKEN_SECONDS)
        self._private, self._current = load_signing_key(cfg.signing_key_pem)
        keys = {self._current.kid: self._current}
        for pem in cfg.previous_signing_keys_pem:
            _, key = load_signing_key(pem)
            keys.setdefault(key.kid, key)
        self._keys = keys
        # Tokens this service verified, until each expires: a client reuses one access token
        # for minutes, and parsing it and checking its Ed25519 signature was the bearer check's
        # largest cost. The approval is still read every call.
        self._verified: OrderedDict[str, AccessClaims] = OrderedDict()
        # Tokens this service refused, until their answer could change: a repeated bad token
        # costs a lookup, not a parse or a signature check.
        self._refused: OrderedDict[str | bytes, _Refusal] = OrderedDict()

    def verify_remembered(self, token: str, now: float | None = None) -> AccessClaims:
        """`verify(token)`, answered from memory for a token seen before: a verified one
        until it expires (with the same leeway as the verification), a refused one (the
        same refusal) until its answer could change."""
        current = time.time() if now is None else now
        claims = self._verified.get(token)
        if claims is not None:
            if claims.expires_at > current - LEEWAY_SECONDS:
                return claims
            del self._verified[token]
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            return self.verify(token)  # refused at once, never remembered
        key = (
            token
            if len(token) <= _REFUSED_KEY_CHARS
            else hashlib.sha256(token.encode("ascii")).digest()
        )
        refusal = self._refused.get(key)
        if refusal is not None:
            if refusal.until > current:
                raise refusal.raised()
            del self._refused[key]
        try:
            claims = self.verify(token)
        except InvalidToken as err:
            until = _answer_holds_until(token, time.time())
            refusal = _Refusal(err.description, err.reason, err.error, until)
            _remember(self._refused, key, refusal, _REFUSED_MAX)
            raise
        _remember(self._verified, token, claims, _VERIFIED_MAX)
        return claims

    @property
    def kid(self) -> str:
        return self._current.kid

    def jwks(self) -> dict[str, Any]:
        """The public keys (current first), as served at /.well-known/jwks.json."""
        return {"keys": [dict(k.jwk) for k in self._keys.values()]}

    def issue_access_token(
        self,
        *,
        account_id: uuid.UUID,
        client_id: str,
        scopes: Iterable[str],
        approval_id: uuid.UUID,
        generation: int,
        not_after: float | None = None,
        now: float | None = None,
    ) -> tuple[str, int]:
        """Sign an access token; return it with its lifetime in seconds.

        `not_after` (a Unix time, e.g. the approval's expiry) shortens the lifetime so a
        token never outlives what backs it.
        """
        iat = int(time.time() if now is None else now)
        exp = iat + self._ttl
        if not_after is not None:
            exp = min(exp, int(not_after))
        if exp <= iat:
            raise ValueError("nothing left to back an access token")
        claims = {
            "iss": self._issuer,
            "aud": self._audience,
            "sub": str(account_id),
            "client_id": client_id,
            "scope": " ".join(sorted(set(scopes))),
            APPROVAL_CLAIM: str(approval_id),
            GENERATION_CLAIM: generation,
            "iat": iat,
            "nbf": iat,
            "exp": exp,
            "jti": b64url(secrets.token_bytes(16)),
        }
        headers = {"kid": self._current.kid, "typ": TOKEN_TYPE}
        token = jwt.encode(claims, self._private, algorithm=self._current.alg, headers=headers)
        return token, exp - iat

    def verify(self, token: str) -> AccessClaims:
        """Verify an access token and return its claims, or raise InvalidToken.

        The checks that need no signature run first, on the unverified token, and can only
        refuse (`_refuse_unsigned`); the token is accepted only by pyjwt's verification of
        its signature and every claim, and the claims returned come from that verification.
        """
        key = self._refuse_unsigned(token)
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.public,
                algorithms=[key.alg],
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": _REQUIRED, "strict_aud": True},
            )
        except jwt.ExpiredSignatureError as err:
            raise self._expired() from err
        except jwt.ImmatureSignatureError as err:
            raise _not_yet_valid() from err
        except jwt.InvalidAudienceError as err:
            raise self._wrong_audience() from err
        except jwt.InvalidIssuerError as err:
            raise self._wrong_issuer() from err
        except jwt.InvalidSignatureError as err:
            raise InvalidToken("The access token signature is invalid", reason="signature") from err
        except jwt.PyJWTError as err:
            raise _malformed() from err
        return self._claims(claims)

    def _refuse_unsigned(self, token: str) -> SigningKey:
        """The key that would verify the token, once every check that needs no signature
        has passed on the unverified token; InvalidToken at the first that fails.

        The header checks are the ones made before pyjwt ever was; the claim checks, their
        order and their refusals are pyjwt's and then `_claims`'s, as `verify` runs them
        after the signature: a token refused here gets the refusal it would get were it
        well signed. Nothing read here is trusted afterwards.
        """
        if len(token) > MAX_TOKEN_CHARS or not token.isascii():
            raise _malformed()
        segments = token.encode("ascii").split(b".")
        if len(segments) != 3:
            raise _malformed()  # not a compact JWS, so nothing we signed
        header = _json_object(segments[0])
        kid = header.get("kid")
        key = self._keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise InvalidToken("The access token was not signed by a known key", reason="signature")
        # The key fixes the algorithm: a header naming another one (none, HS256 keyed with
        # our public key, …) is refused before any verification is attempted.
        if header.get("alg") != key.alg:
            raise InvalidToken("The access token uses an unexpected algorithm", reason="signature")
        typ = header.get("typ")
        if not isinstance(typ, str) or typ.lower() not in (TOKEN_TYPE, "application/" + TOKEN_TYPE):
            raise InvalidToken("The token is not an access token", reason="malformed")
        self._check_claims(_json_object(segments[1]), time.time())
        return key

    def _check_claims(self, claims: dict[str, Any], now: float) -> None:
        """pyjwt's claim checks as `verify` asks for them (required claims; iat, nbf, exp
        with the leeway; iss; aud, strict; sub and jti strings), then `_claims`'s."""
        if any(claims.get(name) is None for name in _REQUIRED):
            raise _malformed()
        iat = _as_int(claims["iat"])
        if iat is None:
            raise _malformed()
        if iat > now + LEEWAY_SECONDS:
            raise _not_yet_valid()
        nbf = _as_int(claims["nbf"])
        if nbf is None:
            raise _malformed()
        if nbf > now + LEEWAY_SECONDS:
            raise _not_yet_valid()
        exp = _as_int(claims["exp"])
        if exp is None:
            raise _malformed()
        if exp <= now - LEEWAY_SECONDS:
            raise self._expired()
        if claims["iss"] != self._issuer:
            raise self._wrong_issuer()
        aud = claims["aud"]
        if not aud:
            raise _malformed()  # pyjwt: an empty audience is a missing one
        if not isinstance(aud, str) or aud != self._audience:
            raise self._wrong_audience()
        if not isinstance(claims["sub"], str) or not isinstance(claims["jti"], str):
            raise _malformed()
        self._claims(claims)

    def _expired(self) -> InvalidToken:
        return InvalidToken(
            f"The access token has expired: refresh it at {self._issuer}/token", reason="expired"
        )

    def _wrong_audience(self) -> InvalidToken:
        return InvalidToken(
            f"The access token is not meant for this resource ({self._audience})",
            reason="audience",
        )

    def _wrong_issuer(self) -> InvalidToken:
        return InvalidToken(
            f"The access token has an unknown issuer (this service issues as {self._issuer})",
            reason="issuer",
        )

    def _claims(self, claims: dict[str, Any]) -> AccessClaims:
        iat, exp = claims["iat"], claims["exp"]
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in (iat, exp)):
            raise InvalidToken("The access token times are malformed", reason="malformed")
        if exp - iat > MAX_ACCESS_TOKEN_SECONDS:
            raise InvalidToken("The access token lives longer than allowed", reason="expired")
        gen, scope, client = claims[GENERATION_CLAIM], claims["scope"], claims["client_id"]
        if not isinstance(gen, int) or isinstance(gen, bool) or not isinstance(scope, str):
            raise InvalidToken("The access token claims are malformed", reason="malformed")
        if not isinstance(client, str) or not isinstance(claims["jti"], str):
            raise InvalidToken("The access token claims are malformed", reason="malformed")
        try:
            account_id = parse_id(claims["sub"])
            approval_id = parse_id(claims[APPROVAL_CLAIM])
        except (TypeError, ValueError, AttributeError) as err:
            raise InvalidToken("The access token claims are malformed", reason="malformed") from err
        return AccessClaims(
            account_id=account_id,
            client_id=client,
            scopes=frozenset(scope.split()),
            approval_id=approval_id,
            generation=gen,
            expires_at=exp,
            jti=claims["jti"],
        )


def _malformed() -> InvalidToken:
    return InvalidToken("The access token is malformed", reason="malformed")


def _not_yet_valid() -> InvalidToken:
    return InvalidToken("The access token is not valid yet", reason="expired")


def _b64url(segment: bytes) -> bytes:
    """Strict unpadded base64url (RFC 7515 §2); ValueError for anything else."""
    if segment.translate(None, _B64URL) or len(segment) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4))


def _json_object(segment: bytes) -> dict[str, Any]:
    """A JWS header or payload segment, decoded; InvalidToken (malformed) unless it is the
    base64url of a JSON object."""
    try:
        value = json.loads(_b64url(segment))
    except (ValueError, RecursionError) as err:
        raise _malformed() from err
    if not isinstance(value, dict):
        raise _malformed()
    return value


def _as_int(value: Any) -> int | None:
    """A time claim as pyjwt reads it (`int(value)`), None where pyjwt refuses it."""
    try:
        return int(value)
    except (ValueError, TypeError, OverflowError):
        return None


def _answer_holds_until(token: str, now: float) -> float:
    """Until when a refusal of `token` (decided at `now`) stays its answer.

    Nothing but time changes the answer for a given token: the keys, issuer and audience are
    fixed for the life of the service. Its readable times can: past `exp` (with the leeway)
    any refusal becomes "expired", and before `nbf` and `iat` (less the leeway) a token can
    still become valid. So a refusal holds until the first of those moments still ahead;
    with none ahead (an expired token, garbage) it never changes, and `_REFUSED_SECONDS`
    bounds how long it is kept.
    """
    segments = token.encode("ascii").split(b".")
    try:
        claims = _json_object(segments[1]) if len(segments) == 3 else {}
    except InvalidToken:
        claims = {}
    exp, nbf, iat = (_as_int(claims.get(name)) for name in ("exp", "nbf", "iat"))
    changes = [exp + LEEWAY_SECONDS] if exp is not None else []
    changes += [start - LEEWAY_SECONDS for start in (nbf, iat) if start is not None]
    ahead = [moment for moment in changes if moment > now]
    return min(ahead) if ahead else now + _REFUSED_SECONDS


def _remember(memo: OrderedDict[_K, _V], key: _K, value: _V, cap: int) -> None:
    """Keep `value` under `key`, dropping the oldest entry first when `memo` is full."""
    if len(memo) >= cap:
        memo.popitem(last=False)
    memo[key] = value
