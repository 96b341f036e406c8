"""Token revocation (RFC 7009) for refresh and access tokens.

Access tokens are self-contained JWTs, so revoking one cannot be recorded per token: instead
revoking either kind of token revokes the approval behind it (its whole token family), which
the bearer check sees on the next MCP call. The account must approve again. Unknown,
expired or already dead tokens get 200 like a success (RFC 7009 §2.2); a token issued to
another client is refused without revoking anything.
"""

from __future__ import annotations

import uuid

import asyncpg
from aiohttp import web

from service.app_keys import DB_POOL, TOKENS
from service.audit.oauth_events import approval_revoked_by_client
from service.auth.approvals import revoke_approval
from service.auth.oauth.client_authentication import authenticated_client
from service.auth.oauth.responses import (
    error_response,
    json_response,
    read_form,
    single,
)
from service.auth.refresh_tokens import hash_refresh_token
from service.auth.tokens import TokenService
from service.errors import InvalidToken, OAuthError

HINTS = ("refresh_token", "access_token")


async def _family_of_refresh(conn: asyncpg.Connection, token: str) -> tuple[uuid.UUID, int] | None:
    row = await conn.fetchrow(
        "SELECT approval_id, generation FROM refresh_tokens WHERE token_hash = $1",
        hash_refresh_token(token),
    )
    return None if row is None else (row["approval_id"], row["generation"])


def _family_of_access(tokens: TokenService, token: str) -> tuple[uuid.UUID, int, str] | None:
    try:
        claims = tokens.verify(token)
    except InvalidToken:
        return None
    return claims.approval_id, claims.generation, claims.client_id


async def revoke(request: web.Request) -> web.Response:
    """POST /revoke."""
    try:
        params = await read_form(request, "revocation request")
        token = single(params, "token")
        hint = single(params, "token_type_hint")
        if not token:
            raise OAuthError("invalid_request", "the token parameter is required")
        if hint is not None and hint not in HINTS:
            raise OAuthError(
                "unsupported_token_type", "token_type_hint must be one of " + ", ".join(HINTS)
            )
        async with request.app[DB_POOL].acquire() as conn:
            client_id = (await authenticated_client(request, params, conn)).client_id
            revoked = await _revoke(conn, request.app[TOKENS], token, client_id)
    except OAuthError as err:
        return error_response(err)
    if revoked is not None:
        await approval_revoked_by_client(request, client_id, revoked)
    return json_response({})


async def _revoke(
    conn: asyncpg.Connection, tokens: TokenService, token: str, client_id: str
) -> uuid.UUID | None:
    """The approval this revoked (None: nothing changed)."""
    found = await _family_of_refresh(conn, token)
    owner: str | None = None
    if found is None:
        access = _family_of_access(tokens, token)
        if access is None:
            return None
        approval_id, generation, owner = access
    else:
        approval_id, generation = found
    async with conn.transaction():
        row = await conn.fetchrow(
            "SELECT client_id, generation FROM approvals WHERE id = $1 FOR UPDATE", approval_id
        )
        if row is None:
            return None
        if row["client_id"] != client_id or (owner is not None and owner != client_id):
            raise OAuthError("invalid_request", "the token was not issued to this client")
        if row["generation"] == generation and await revoke_approval(
            conn, approval_id, reason="client"
        ):
            return approval_id
    return None
