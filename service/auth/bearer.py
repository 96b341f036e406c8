"""The bearer check of every MCP request: who is calling, through which live approval.

`authenticate` reads the `Authorization: Bearer` header, verifies the access token, then in
ONE SQL round trip confirms the approval is still active at the token's generation and
recomputes the eligible workspace set (the approval's workspaces the account is still a
member of, with the current role). Revocation, expiry, a re-approval and a lost membership
therefore take effect on the next call. `challenge` builds the `WWW-Authenticate` value.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

import asyncpg
from aiohttp import hdrs, web

from service.auth.caller import ALL_SCOPES, Caller
from service.auth.tokens import AccessClaims, TokenService
from service.config import Config
from service.errors import AuthError, InsufficientScope, InvalidToken, Unavailable
from service.keys import CALLER, CONFIG, DB_POOL, METRICS, TOKENS

log = logging.getLogger(__name__)

METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
# RFC 6750 b64token; anything else in the credentials is malformed.
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
# error_description may hold only these characters (RFC 6750 §3).
_UNSAFE_DESCRIPTION = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
_QUERY_TOKEN_PARAM = "access_token"


def approval_query(approval_id: str) -> str:
    """The approval row and its eligible set, for the approval id in parameter
    `approval_id` ("$1"): also embedded in the execution tools' first statement."""
    return f"""
    SELECT a.account_id, a.client_id, a.generation, a.scopes,
           a.revoked_at IS NOT NULL AS revoked,
           a.expires_at <= now() AS expired,
           coalesce(array_agg(m.workspace_id ORDER BY m.workspace_id)
                    FILTER (WHERE m.workspace_id IS NOT NULL), '{{}}') AS workspace_ids,
           coalesce(array_agg(m.role ORDER BY m.workspace_id)
                    FILTER (WHERE m.workspace_id IS NOT NULL), '{{}}') AS roles
      FROM approvals a
      LEFT JOIN approval_workspaces aw ON aw.approval_id = a.id
      LEFT JOIN memberships m ON m.account_id = a.account_id AND m.workspace_id = aw.workspace_id
     WHERE a.id = {approval_id}
     GROUP BY a.id
"""


_APPROVAL_QUERY = approval_query("$1")


def _fail(description: str, reason: str, *, error: str = "invalid_token") -> InvalidToken:
    return InvalidToken(description, reason=reason, error=error)


def bearer_token(request: web.Request) -> str:
    """The token of the request's single `Authorization: Bearer` header."""
    if _QUERY_TOKEN_PARAM in request.query:
        raise _fail(
            "Access tokens are accepted only in the Authorization header",
            "malformed",
            error="invalid_request",
        )
    values = request.headers.getall(hdrs.AUTHORIZATION, [])
    if not values:
        raise _fail("Authentication required: send Authorization: Bearer <token>", "missing")
    if len(values) > 1:
        raise _fail("Send one Authorization header", "malformed", error="invalid_request")
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        raise _fail("Use the Bearer authentication scheme", "malformed", error="invalid_request")
    if not _TOKEN.fullmatch(token):
        raise _fail("The bearer token is malformed", "malformed")
    return token


def verified_claims(tokens: TokenService, token: str, now: float | None = None) -> AccessClaims:
    """The token's verified claims, remembered by the token service until it expires."""
    return tokens.verify_remembered(token, now)


async def authenticate(request: web.Request, *, read_approval: bool = True) -> Caller:
    """Return the request's Caller (also stored in `request[CALLER]`) or raise AuthError.

    With `read_approval=False` the token is verified but the approval row is left to the
    request's tool (`Tool.authorizes`): the caller returned is pending (`Caller.pending`).
    """
    app = request.app
    try:
        claims = verified_claims(app[TOKENS], bearer_token(request))
        caller = _pending(claims)
        if read_approval:
            caller = await _load_caller(app, caller)
    except InvalidToken as err:
        app[METRICS].auth_failed(err.reason)
        raise
    except AuthError:
        app[METRICS].auth_failed("other")
        raise
    request[CALLER] = caller
    return caller


async def confirm(app: web.Application, caller: Caller) -> Caller:
    """A pending caller confirmed by reading its approval on its own (the path of a request
    that failed before its tool's first statement); a confirmed caller as it is. The
    transport counts the failure (`auth_reason`), as for every AuthError of dispatch."""
    if caller.confirmed:
        return caller
    return await _load_caller(app, caller)


def confirmed_caller(caller: Caller, row: Mapping[str, Any] | None) -> Caller:
    """The caller of a pending token confirmed by its approval row (`approval_query`'s
    columns; None or a null generation: the approval is gone), else InvalidToken."""
    if row is None or row["generation"] is None:
        raise _fail("The approval behind this token no longer exists", "revoked")
    if row["revoked"]:
        raise _fail("The approval behind this token was revoked", "revoked")
    if row["generation"] != caller.generation:
        raise _fail("The approval behind this token was replaced; use its newer tokens", "revoked")
    if row["expired"]:
        raise _fail("The approval behind this token has expired", "approval_expired")
    if row["account_id"] != caller.account_id or row["client_id"] != caller.client_id:
        raise _fail("The access token does not match its approval", "other")
    eligible: dict[uuid.UUID, str] = dict(zip(row["workspace_ids"], row["roles"], strict=True))
    return Caller.build(
        account_id=caller.account_id,
        approval_id=caller.approval_id,
        generation=caller.generation,
        client_id=caller.client_id,
        # A token never grants more than its approval holds now.
        scopes=caller.scopes & frozenset(row["scopes"]),
        eligible=eligible,
    )


async def _load_caller(app: web.Application, pending: Caller) -> Caller:
    cfg = app[CONFIG]
    started = time.perf_counter()
    failed = True
    try:
        async with asyncio.timeout(min(10.0, cfg.limits.request_deadline_seconds)):
            row = await app[DB_POOL].fetchrow(_APPROVAL_QUERY, pending.approval_id)
        failed = False
    except (
        OSError,
        TimeoutError,
        asyncpg.PostgresError,
        asyncpg.InterfaceError,
        # Raised when the pool resets a connection the server already dropped (a restart).
        asyncpg.InternalClientError,
    ) as err:
        log.warning("authorization store unavailable: %s", type(err).__name__)
        raise Unavailable(
            "Authorization is temporarily unavailable; retry shortly", retry_after_seconds=1
        ) from err
    finally:
        app[METRICS].db_call("auth", time.perf_counter() - started, failed)
    return confirmed_caller(pending, row)


def _pending(claims: AccessClaims) -> Caller:
    return Caller.pending(
        account_id=claims.account_id,
        approval_id=claims.approval_id,
        generation=claims.generation,
        client_id=claims.client_id,
        scopes=claims.scopes,
    )


def auth_reason(err: AuthError) -> str:
    """The metrics label of an authorization failure."""
    if isinstance(err, InvalidToken):
        return err.reason
    return "insufficient_scope" if isinstance(err, InsufficientScope) else "other"


def _quoted(value: str) -> str:
    return _UNSAFE_DESCRIPTION.sub("?", value)


def challenge(err: AuthError, cfg: Config) -> str:
    """The `WWW-Authenticate` value for a 401 or 403 answer.

    No credentials at all: no error code (RFC 6750 §3.1), the resource metadata and every
    scope a client can ask for (the MCP authorization specification's scope selection).
    A bad, expired or revoked token: `invalid_token`. Too few scopes: `insufficient_scope`
    naming the scopes the call needs.
    """
    parts = [f'resource_metadata="{cfg.public_url}{METADATA_PATH}"']
    if isinstance(err, InvalidToken) and err.reason == "missing":
        parts.append(f'scope="{" ".join(ALL_SCOPES)}"')
        return "Bearer " + ", ".join(parts)
    parts += [f'error="{err.error}"', f'error_description="{_quoted(err.description)}"']
    if isinstance(err, InsufficientScope):
        parts.append(f'scope="{_quoted(err.required_scope)}"')
    return "Bearer " + ", ".join(parts)
