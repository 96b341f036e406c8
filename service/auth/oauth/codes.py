"""Authorization codes: issued when the account approves, redeemed once at the token endpoint.

A code lives 60 seconds and is bound to the client, the redirect URI, the PKCE challenge,
the resource and the approval generation it was issued for; only its SHA-256 is stored.
Redeeming locks the code row, so two exchanges of one code take turns. A code presented a
second time revokes the approval it was issued for (RFC 6749 §4.1.2: the tokens it bought
may be in an attacker's hands), unless the approval was re-approved since.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from datetime import timedelta

import asyncpg

from service.auth.approvals import (
    LOCKED_APPROVAL_COLUMNS,
    Approval,
    IssuedTokens,
    issue_tokens,
    locked_approval,
    revoke_approval,
)
from service.auth.oauth.authorization_requests import AuthorizationRequest, same_resource
from service.auth.tokens import TokenService
from service.crypto import b64url
from service.errors import OAuthError

CODE_LIFETIME = timedelta(seconds=60)
_VERIFIER = re.compile(r"[A-Za-z0-9\-._~]{43,128}")


def _hash(code: str) -> bytes:
    return hashlib.sha256(code.encode("utf-8")).digest()


def s256(verifier: str) -> str:
    return b64url(hashlib.sha256(verifier.encode("ascii")).digest())


async def issue_code(
    conn: asyncpg.Connection, req: AuthorizationRequest, approval: Approval
) -> str:
    code = secrets.token_urlsafe(32)
    # Housekeeping: codes of this approval that expired can never be redeemed, and are too
    # old for a reuse to matter (the approval's later generation ignores them anyway).
    await conn.execute(
        "DELETE FROM authorization_codes WHERE approval_id = $1"
        " AND expires_at <= now() - interval '1 hour'",
        approval.id,
    )
    await conn.execute(
        "INSERT INTO authorization_codes (code_hash, client_id, approval_id, generation,"
        " redirect_uri, code_challenge, resource, expires_at)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7, now() + $8)",
        _hash(code),
        req.client.client_id,
        approval.id,
        approval.generation,
        req.redirect_uri,
        req.code_challenge,
        req.resource,
        CODE_LIFETIME,
    )
    return code


def _grant(description: str) -> OAuthError:
    return OAuthError("invalid_grant", description)


_LOCK_CODE = """
    SELECT client_id, approval_id, generation, redirect_uri, code_challenge, resource,
           used_at IS NOT NULL AS used, expires_at <= now() AS expired
      FROM authorization_codes WHERE code_hash = $1 FOR UPDATE
"""
_LOCK_APPROVAL = f"SELECT {LOCKED_APPROVAL_COLUMNS} FROM approvals WHERE id = $1 FOR UPDATE"


async def redeem_code(
    conn: asyncpg.Connection,
    tokens: TokenService,
    *,
    code: str,
    client_id: str,
    redirect_uri: str | None,
    verifier: str,
    resource: str | None,
    our_resource: str,
) -> IssuedTokens:
    """Trade a code for the approval's first tokens, once; raise OAuthError otherwise."""
    refusal: OAuthError | None = None
    issued: IssuedTokens | None = None
    async with conn.transaction():
        row = await conn.fetchrow(_LOCK_CODE, _hash(code))
        if row is None:
            raise _grant("the authorization code is unknown")
        if row["client_id"] != client_id:
            raise _grant("the authorization code was issued to another client")
        approval = await conn.fetchrow(_LOCK_APPROVAL, row["approval_id"])
        current = approval is not None and approval["generation"] == row["generation"]
        if row["used"]:
            if current and not approval["revoked"]:
                await revoke_approval(conn, row["approval_id"], reason="code_reuse")
            refusal = _grant(
                "the authorization code was already used; the approval is revoked for safety"
            )
        elif row["expired"]:
            refusal = _grant("the authorization code has expired")
        elif redirect_uri is not None and redirect_uri != row["redirect_uri"]:
            refusal = _grant("redirect_uri differs from the authorization request")
        elif resource is not None and not same_resource(resource, row["resource"]):
            refusal = OAuthError("invalid_target", f"the code was issued for {our_resource}")
        elif not _VERIFIER.fullmatch(verifier) or not hmac.compare_digest(
            s256(verifier), row["code_challenge"]
        ):
            refusal = _grant("the code_verifier does not match the code_challenge")
        elif approval is None or not current or approval["revoked"]:
            refusal = _grant("the approval behind this code was replaced or revoked")
        elif approval["expired"]:
            refusal = _grant("the approval has expired")
        else:
            await conn.execute(
                "UPDATE authorization_codes SET used_at = now() WHERE code_hash = $1", _hash(code)
            )
            issued = await issue_tokens(conn, tokens, locked_approval(approval))
    # Raised after the commit: a reused code must leave its approval revoked.
    if refusal is not None:
        raise refusal
    assert issued is not None
    return issued
