"""The JWT bearer grant of an ID-JAG (RFC 7523 with the ID-JAG profile) at /token.

`jwt_bearer_grant` verifies the assertion (id_jag.py) for a trusted IdP (trusted_idps.py),
marks its `jti` used (replay.py), finds the account (the IdP's subject binding, else at the
first grant the account whose email the assertion names, in the IdP's domain), makes or
renews the account's approval for the client through that IdP, and issues an access token
only: no refresh token, so the IdP stays the point of control (docs/enterprise-clients.md).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import asyncpg
import jwt
from aiohttp import web
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from service.app_keys import CONFIG, IDP_JWKS
from service.auth.approvals import MAX_WORKSPACES, Approval, grant_approval
from service.auth.caller import ALL_SCOPES
from service.auth.clients.registry import Client
from service.auth.enterprise.id_jag import IdJag, read_id_jag, refused, unverified_issuer
from service.auth.enterprise.jwks import JwksCache, JwksUnavailable
from service.auth.enterprise.replay import first_use
from service.auth.enterprise.trusted_idps import TrustedIdp, load_idp
from service.auth.tokens import TokenService
from service.errors import ApprovalRefused, OAuthError


async def jwks_cache_ctx(app: web.Application) -> AsyncIterator[None]:
    app[IDP_JWKS] = JwksCache(allow_private=app[CONFIG].oauth_cimd_allow_private)
    yield
    await app[IDP_JWKS].close()


@dataclass(frozen=True, slots=True)
class IdpGrant:
    approval: Approval
    issuer: str
    access_token: str
    expires_in: int
    scope: str


@dataclass(frozen=True, slots=True)
class GrantContext:
    tokens: TokenService
    jwks: JwksCache
    redis: Redis | RedisCluster | None
    key_prefix: str
    our_issuer: str
    resource_ok: Callable[[str], bool]


def _scopes(jag: IdJag, asked: frozenset[str] | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the approval's scopes, the token's): the ID-JAG's (all when it names none), then
    those of the request when it names any."""
    granted = ALL_SCOPES if jag.scopes is None else tuple(dict.fromkeys(jag.scopes))
    unknown = [s for s in granted if s not in ALL_SCOPES]
    if unknown:
        raise refused(f"the assertion grants scope {unknown[0]}, which this server does not define")
    approval = tuple(sorted(granted))
    carried = approval if asked is None else tuple(s for s in approval if s in asked)
    if not approval or not carried:
        raise OAuthError("invalid_scope", "the request and the assertion share no scope")
    return approval, carried


async def _account(conn: asyncpg.Connection, idp: TrustedIdp, jag: IdJag) -> uuid.UUID:
    bound: uuid.UUID | None = await conn.fetchval(
        "SELECT account_id FROM idp_subjects WHERE issuer = $1 AND subject = $2",
        idp.issuer, jag.subject,
    )  # fmt: skip
    if bound is not None:
        return bound
    email = jag.email
    if email is None or jag.email_verified is False:
        raise refused("the IdP's subject is not bound to an account and names no verified email")
    local, at, domain = email.rpartition("@")
    if not at or not local or domain.lower() != idp.domain:
        raise refused(f"the assertion's email is not in the IdP's domain {idp.domain}")
    found: uuid.UUID | None = await conn.fetchval(
        "SELECT id FROM accounts WHERE lower(email) = lower($1)", email
    )
    if found is None:
        raise refused("no account has the assertion's email")
    await conn.execute(
        "INSERT INTO idp_subjects (issuer, subject, account_id) VALUES ($1, $2, $3)"
        " ON CONFLICT DO NOTHING",
        idp.issuer, jag.subject, found,
    )  # fmt: skip
    bound = await conn.fetchval(
        "SELECT account_id FROM idp_subjects WHERE issuer = $1 AND subject = $2",
        idp.issuer, jag.subject,
    )  # fmt: skip
    return bound or found


async def _workspaces(
    conn: asyncpg.Connection, idp: TrustedIdp, account_id: uuid.UUID
) -> list[uuid.UUID]:
    members = await conn.fetch(
        "SELECT workspace_id FROM memberships WHERE account_id = $1 ORDER BY workspace_id",
        account_id,
    )
    mine = [r["workspace_id"] for r in members]
    if idp.workspace_ids:
        chosen = [w for w in idp.workspace_ids if w in set(mine)]
        if not chosen:
            raise refused("the account is a member of none of the workspaces the IdP allows")
    else:
        chosen = mine
        if not chosen:
            raise refused("the account is a member of no workspace")
    if len(chosen) > MAX_WORKSPACES:
        raise refused(
            f"the account has {len(chosen)} workspaces, more than the {MAX_WORKSPACES} an"
            " approval covers; the operator limits the IdP with --workspace"
        )
    return chosen


async def trusted_issuer(conn: asyncpg.Connection, assertion: str) -> TrustedIdp:
    """The trusted IdP the assertion claims to come from, or invalid_grant."""
    idp = await load_idp(conn, unverified_issuer(assertion))
    if idp is None:
        raise refused("the assertion's issuer is not a trusted IdP")
    return idp


async def jwt_bearer_grant(
    conn: asyncpg.Connection,
    ctx: GrantContext,
    idp: TrustedIdp,
    client: Client,
    assertion: str,
    asked: frozenset[str] | None,
) -> IdpGrant:
    """Trade a verified ID-JAG from `idp` for an access token, or OAuthError."""

    async def key_of(issuer: str, kid: str) -> jwt.PyJWK | None:
        return await ctx.jwks.key(issuer, idp.jwks_uri, kid)

    try:
        jag = await read_id_jag(
            assertion, key_of, our_issuer=ctx.our_issuer, resource_ok=ctx.resource_ok
        )
    except JwksUnavailable as err:
        raise refused(str(err)) from None
    if jag.client_id != client.client_id:
        raise refused("the assertion was issued to another client")
    if idp.client_ids and client.client_id not in idp.client_ids:
        raise refused("the IdP is not allowed to grant access to this client")
    approval_scopes, carried = _scopes(jag, asked)
    ttl = jag.expires_at - time.time() + 60
    if not await first_use(ctx.redis, ctx.key_prefix, jag.issuer, jag.jti, ttl):
        raise refused("the assertion was already used")
    account_id = await _account(conn, idp, jag)
    workspaces = await _workspaces(conn, idp, account_id)
    try:
        approval = await grant_approval(
            conn, account_id=account_id, client_id=client.client_id, workspace_ids=workspaces,
            scopes=approval_scopes, expires=idp.expires, idp_issuer=idp.issuer,
        )  # fmt: skip
    except ApprovalRefused as err:
        raise refused(str(err)) from None
    access, expires_in = ctx.tokens.issue_access_token(
        account_id=account_id,
        client_id=client.client_id,
        scopes=carried,
        approval_id=approval.id,
        generation=approval.generation,
        not_after=approval.expires_at.timestamp(),
    )
    return IdpGrant(approval, idp.issuer, access, expires_in, " ".join(carried))
