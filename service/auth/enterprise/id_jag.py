"""The Identity Assertion JWT Authorization Grant (ID-JAG) as this server accepts it.

`read_id_jag` checks an assertion in the order of draft-ietf-oauth-identity-assertion-authz-
grant §4.4.1 and the MCP profile: the header (`typ` oauth-id-jag+jwt, an asymmetric `alg`
of RS256/ES256/EdDSA, a `kid`), the issuer (a trusted IdP), the signature (a key of its
JWKS), then the claims (`aud` our issuer, `resource` our MCP resource when present, `sub`,
`client_id`, `jti`, `exp`/`iat` within 60 s of skew and a lifetime of at most 10 minutes).
Every refusal is an `invalid_grant` OAuthError with one line; the assertion is never kept,
logged or quoted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import jwt

from service.auth.enterprise.jwks import ALGORITHMS
from service.errors import OAuthError

TYP = "oauth-id-jag+jwt"
SKEW_SECONDS = 60
MAX_LIFETIME_SECONDS = 600
MAX_ASSERTION_CHARS = 16 * 1024

KeyLookup = Callable[[str, str], Awaitable[jwt.PyJWK | None]]  # (issuer, kid) → key


@dataclass(frozen=True, slots=True)
class IdJag:
    issuer: str
    subject: str
    client_id: str
    jti: str
    expires_at: float
    scopes: tuple[str, ...] | None  # None: the claim is absent
    email: str | None
    email_verified: bool | None
    resource: str | None


def refused(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description)


def _header(assertion: str) -> dict[str, Any]:
    if len(assertion) > MAX_ASSERTION_CHARS:
        raise refused(f"the assertion is longer than {MAX_ASSERTION_CHARS} characters")
    try:
        return jwt.get_unverified_header(assertion)
    except jwt.PyJWTError:
        raise refused("the assertion is not a signed JWT") from None


def _typ_ok(typ: object) -> bool:
    return isinstance(typ, str) and typ.lower().removeprefix("application/") == TYP


def unverified_issuer(assertion: str) -> str:
    """The `iss` the assertion claims (before any check), to find the IdP's keys."""
    header = _header(assertion)
    if not _typ_ok(header.get("typ")):
        raise refused(f"the assertion's typ must be {TYP}")
    if header.get("alg") not in ALGORITHMS:
        raise refused(f"the assertion must be signed with {', '.join(ALGORITHMS)}")
    if not isinstance(header.get("kid"), str):
        raise refused("the assertion's header names no kid")
    try:
        claims = jwt.decode(assertion, options={"verify_signature": False})
    except jwt.PyJWTError:
        raise refused("the assertion's claims are not a JSON object") from None
    issuer = claims.get("iss")
    if not isinstance(issuer, str) or not issuer:
        raise refused("the assertion has no iss")
    return issuer


async def read_id_jag(
    assertion: str,
    key_of: KeyLookup,
    *,
    our_issuer: str,
    resource_ok: Callable[[str], bool],
    now: float | None = None,
) -> IdJag:
    """The verified ID-JAG, or OAuthError invalid_grant (an issuer not trusted is the
    caller's to refuse before: `key_of` looks keys up for a trusted one)."""
    header = _header(assertion)
    issuer = unverified_issuer(assertion)
    key = await key_of(issuer, header["kid"])
    if key is None:
        raise refused("the assertion is signed with a key the IdP does not publish")
    try:
        claims = jwt.decode(
            assertion,
            key,
            algorithms=[header["alg"]],
            options={"verify_aud": False, "verify_exp": False, "verify_iat": False,
                     "verify_nbf": False, "require": []},
        )  # fmt: skip
    except jwt.InvalidSignatureError:
        raise refused("the assertion's signature does not verify") from None
    except jwt.PyJWTError:
        raise refused("the assertion cannot be verified with the IdP's key") from None
    return _claims(claims, issuer, our_issuer, resource_ok, time.time() if now is None else now)


def _text(claims: dict[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise refused(f"the assertion has no {name}")
    return value


def _instant(value: object) -> TypeGuard[int | float]:
    """A NumericDate: a finite number (json reads NaN and Infinity too), not a boolean."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _claims(
    claims: dict[str, Any],
    issuer: str,
    our_issuer: str,
    resource_ok: Callable[[str], bool],
    now: float,
) -> IdJag:
    aud = claims.get("aud")
    if not (aud == our_issuer or aud == [our_issuer]):
        raise refused(f"the assertion's aud must be {our_issuer}")
    resource = claims.get("resource")
    if resource is not None and (not isinstance(resource, str) or not resource_ok(resource)):
        raise refused("the assertion's resource is not this server's MCP resource")
    subject = _text(claims, "sub")
    client_id = _text(claims, "client_id")
    jti = _text(claims, "jti")
    exp, iat = claims.get("exp"), claims.get("iat")
    if not _instant(exp):
        raise refused("the assertion has no exp")
    if not _instant(iat):
        raise refused("the assertion has no iat")
    if exp + SKEW_SECONDS <= now:
        raise refused("the assertion has expired")
    if iat > now + SKEW_SECONDS:
        raise refused("the assertion's iat is in the future")
    if exp - iat > MAX_LIFETIME_SECONDS or exp < iat:
        raise refused(f"the assertion's lifetime is over {MAX_LIFETIME_SECONDS} seconds")
    scope = claims.get("scope")
    if scope is not None and not isinstance(scope, str):
        raise refused("the assertion's scope must be a space-separated string")
    email = claims.get("email")
    verified = claims.get("email_verified")
    return IdJag(
        issuer=issuer,
        subject=subject,
        client_id=client_id,
        jti=jti,
        expires_at=float(exp),
        scopes=None if scope is None else tuple(scope.split()),
        email=email if isinstance(email, str) else None,
        email_verified=verified if isinstance(verified, bool) else None,
        resource=resource,
    )
