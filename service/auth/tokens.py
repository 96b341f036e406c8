"""Access tokens (signed JWTs), their verification, the JWKS, and opaque refresh tokens.

Access tokens follow the JWT profile of RFC 9068 (`typ: at+jwt`) and live at most five
minutes. They are signed with the configured key (Ed25519 → EdDSA, EC P-256 → ES256) and
carry the approval id and generation, so the bearer check can tie each call back to a live
approval. Verification never trusts the token's header: the algorithm comes from the key
that `kid` names, `none` and HMAC are never accepted, and audience and issuer must match
exactly. Keys from a rotation stay here verification-only until their tokens have expired.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from service.config import Config
from service.crypto import b64url
from service.errors import InvalidToken

MAX_ACCESS_TOKEN_SECONDS = 300
LEEWAY_SECONDS = 5
_VERIFIED_MAX = 4096  # remembered verified tokens per TokenService (a few MB at most)
TOKEN_TYPE = "at+jwt"
REFRESH_TOKEN_BYTES = 32

# Claim names beyond the registered ones (RFC 9068 uses client_id and scope as well).
APPROVAL_CLAIM = "approval_id"
GENERATION_CLAIM = "approval_gen"
_REQUIRED = ["iss", "aud", "sub", "exp", "iat", "nbf", "jti", "client_id", "scope"]
_REQUIRED += [APPROVAL_CLAIM, GENERATION_CLAIM]

PublicKey = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey
PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


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
class _Key:
    kid: str
    alg: str
    public: PublicKey
    jwk: dict[str, str]


def _public_jwk(public: PublicKey) -> tuple[str, dict[str, str]]:
    """(alg, the key's required JWK members) for an Ed25519 or P-256 public key."""
    if isinstance(public, ed25519.Ed25519PublicKey):
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return "EdDSA", {"crv": "Ed25519", "kty": "OKP", "x": b64url(raw)}
    if isinstance(public.curve, ec.SECP256R1):
        nums = public.public_numbers()
        return "ES256", {
            "crv": "P-256",
            "kty": "EC",
            "x": b64url(nums.x.to_bytes(32, "big")),
            "y": b64url(nums.y.to_bytes(32, "big")),
        }
    raise ValueError("signing keys must be Ed25519 or EC P-256")


def jwk_thumbprint(members: dict[str, str]) -> str:
    """RFC 7638: SHA-256 over the required members, sorted, without whitespace."""
    canonical = json.dumps(members, sort_keys=True, separators=(",", ":"))
    return b64url(hashlib.sha256(canonical.encode("utf-8")).digest())


def _load(pem: bytes) -> tuple[PrivateKey, _Key]:
    private = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(private, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey):
        raise ValueError("signing keys must be Ed25519 or EC P-256")
    public = private.public_key()
    alg, members = _public_jwk(public)
    kid = jwk_thumbprint(members)
    return private, _Key(kid, alg, public, {**members, "kid": kid, "alg": alg, "use": "sig"})


def new_refresh_token() -> str:
    """An opaque refresh token: 32 random bytes, URL-safe."""
    return secrets.token_urlsafe(REFRESH_TOKEN_BYTES)


def hash_refresh_token(token: str) -> bytes:
    """What the database stores instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).digest()


class TokenService:
    """Issues and verifies access tokens for one issuer and one MCP resource."""

    def __init__(self, cfg: Config) -> None:
        if not cfg.signing_key_pem:
            raise ValueError("a signing key is required to issue or verify access tokens")
        self._issuer = cfg.issuer
        self._audience = cfg.mcp_resource
        self._ttl = min(cfg.access_token_ttl_seconds, MAX_ACCESS_TOKEN_SECONDS)
        self._private, self._current = _load(cfg.signing_key_pem)
        keys = {self._current.kid: self._current}
        for pem in cfg.previous_signing_keys_pem:
            _, key = _load(pem)
            keys.setdefault(key.kid, key)
        self._keys = keys
        # Tokens this service verified, until each expires: a client reuses one access token
        # for minutes, and parsing it and checking its Ed25519 signature was the bearer check's
        # largest cost. Only verified tokens are kept; the approval is still read every call.
        self._verified: dict[str, AccessClaims] = {}

    def verify_remembered(self, token: str, now: float | None = None) -> AccessClaims:
        """`verify(token)`, answered from memory for a token verified before that has not
        expired since (with the same leeway as the verification)."""
        claims = self._verified.get(token)
        current = time.time() if now is None else now
        if claims is not None:
            if claims.expires_at > current - LEEWAY_SECONDS:
                return claims
            del self._verified[token]
        claims = self.verify(token)
        if len(self._verified) >= _VERIFIED_MAX:
            del self._verified[next(iter(self._verified))]  # the oldest entry
        self._verified[token] = claims
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
        """Verify an access token and return its claims, or raise InvalidToken."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as err:
            raise InvalidToken("The access token is malformed", reason="malformed") from err
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
            raise InvalidToken(
                f"The access token has expired: refresh it at {self._issuer}/token",
                reason="expired",
            ) from err
        except jwt.ImmatureSignatureError as err:
            raise InvalidToken("The access token is not valid yet", reason="expired") from err
        except jwt.InvalidAudienceError as err:
            raise InvalidToken(
                f"The access token is not meant for this resource ({self._audience})",
                reason="audience",
            ) from err
        except jwt.InvalidIssuerError as err:
            raise InvalidToken(
                f"The access token has an unknown issuer (this service issues as {self._issuer})",
                reason="issuer",
            ) from err
        except jwt.InvalidSignatureError as err:
            raise InvalidToken("The access token signature is invalid", reason="signature") from err
        except jwt.PyJWTError as err:
            raise InvalidToken("The access token is malformed", reason="malformed") from err
        return self._claims(claims)

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
            account_id = uuid.UUID(claims["sub"])
            approval_id = uuid.UUID(claims[APPROVAL_CLAIM])
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
