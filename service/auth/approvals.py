"""Approvals: one account's consent for one OAuth client, and the tokens that consent backs.

`grant_approval` is the one way an approval is created or changed, used by the operator
command (`elova-mcp approve`) and by the approval page. `issue_tokens` gives a granted
approval its first access and refresh token; `rotate_refresh_token` trades a refresh token
for new ones exactly once; `revoke_approval` ends an approval on the next call.

Concurrency: granting locks the account row (so the active-approval cap cannot be raced),
and everything that changes an approval's tokens locks the approval row first, so two
refreshes with the same token are serialised and at most one of them succeeds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import asyncpg

from service.auth.caller import ALL_SCOPES
from service.auth.refresh_tokens import hash_refresh_token, new_refresh_token
from service.auth.tokens import TokenService
from service.errors import (
    ApprovalLimitReached,
    ApprovalRefused,
    GrantRefused,
    RefreshReused,
    ScopeRefused,
)

EXPIRY_CHOICES = {"1d": timedelta(days=1), "7d": timedelta(days=7), "30d": timedelta(days=30)}
MAX_WORKSPACES = 50
MAX_ACTIVE_APPROVALS = 100
REVOKE_HINT = "revoke one first with `elova-mcp approve --revoke APPROVAL_ID`"


@dataclass(frozen=True, slots=True)
class Approval:
    id: uuid.UUID
    account_id: uuid.UUID
    client_id: str
    generation: int
    scopes: tuple[str, ...]
    expires_at: datetime
    workspace_ids: tuple[uuid.UUID, ...]


@dataclass(frozen=True, slots=True)
class IssuedTokens:
    approval_id: uuid.UUID
    access_token: str
    refresh_token: str
    expires_in: int
    scope: str
    account_id: uuid.UUID | None = None  # whose approval (for the audit trail)


def parse_scopes(raw: str | Iterable[str]) -> tuple[str, ...]:
    """Space-separated scopes (or a list of them) → a sorted tuple of known scopes."""
    items = raw.split() if isinstance(raw, str) else [s for part in raw for s in part.split()]
    unknown = sorted(set(items) - set(ALL_SCOPES))
    if unknown:
        raise ApprovalRefused(
            f"unknown scope {', '.join(unknown)}; choose from {' '.join(ALL_SCOPES)}"
        )
    if not items:
        raise ApprovalRefused(f"choose at least one scope: {' '.join(ALL_SCOPES)}")
    return tuple(sorted(set(items)))


def parse_expiry(raw: str) -> timedelta:
    try:
        return EXPIRY_CHOICES[raw]
    except KeyError:
        raise ApprovalRefused(
            f"expiry {raw!r} is not offered; choose {', '.join(EXPIRY_CHOICES)}"
        ) from None


async def create_operator_client(conn: asyncpg.Connection, name: str) -> str:
    """A client of the operator's own (no redirect URIs), for one `approve` run."""
    client_id = f"op_{uuid.uuid4().hex}"
    await conn.execute(
        "INSERT INTO oauth_clients (client_id, client_name, kind, grant_types, response_types)"
        " VALUES ($1, $2, 'operator', '{refresh_token}', '{}')",
        client_id,
        name,
    )
    return client_id


async def grant_approval(
    conn: asyncpg.Connection,
    *,
    account_id: uuid.UUID,
    client_id: str,
    workspace_ids: Sequence[uuid.UUID],
    scopes: str | Iterable[str],
    expires: str,
    idp_issuer: str | None = None,
) -> Approval:
    """Create the (account, client) approval, or update it and increment its generation.

    With `idp_issuer` (a grant through a trusted IdP, service/auth/enterprise/) the approval
    names that IdP, and a renewal of an unrevoked approval that changes neither its
    workspaces nor its scopes keeps its generation (its tokens and cursors stay valid)."""
    chosen = tuple(dict.fromkeys(workspace_ids))  # keep the order given, drop repeats
    scope_set = parse_scopes(scopes)
    lifetime = parse_expiry(expires)
    if not chosen:
        raise ApprovalRefused("choose at least one workspace")
    if len(chosen) > MAX_WORKSPACES:
        raise ApprovalRefused(
            f"an approval can include at most {MAX_WORKSPACES} workspaces, not {len(chosen)}"
        )
    async with conn.transaction():
        # The account row lock serialises grants per account: the cap below cannot be raced.
        found = await conn.fetchval(
            "SELECT true FROM accounts WHERE id = $1 FOR NO KEY UPDATE", account_id
        )
        if not found:
            raise ApprovalRefused(f"no account with id {account_id}")
        if not await conn.fetchval(
            "SELECT true FROM oauth_clients WHERE client_id = $1", client_id
        ):
            raise ApprovalRefused(f"no registered client with id {client_id}")
        members = await conn.fetch(
            "SELECT workspace_id FROM memberships WHERE account_id = $1 AND workspace_id = ANY($2)",
            account_id,
            list(chosen),
        )
        missing = set(chosen) - {r["workspace_id"] for r in members}
        if missing:
            listed = ", ".join(str(w) for w in chosen if w in missing)
            raise ApprovalRefused(f"the account is not a member of workspace {listed}")
        active = await conn.fetchval(
            "SELECT count(*) FROM approvals WHERE account_id = $1 AND client_id <> $2"
            " AND revoked_at IS NULL AND expires_at > now()",
            account_id,
            client_id,
        )
        if active >= MAX_ACTIVE_APPROVALS:
            raise ApprovalLimitReached(
                f"the account already has {active} active approvals, the most allowed;"
                f" {REVOKE_HINT}"
            )
        args = (uuid.uuid4(), account_id, client_id, list(scope_set), lifetime)
        if idp_issuer is None:
            row = await conn.fetchrow(_GRANT, *args)
        else:
            row = await conn.fetchrow(_GRANT_THROUGH_IDP, *args, idp_issuer, sorted(chosen))
        await conn.execute("DELETE FROM approval_workspaces WHERE approval_id = $1", row["id"])
        await conn.execute(
            "INSERT INTO approval_workspaces (approval_id, workspace_id)"
            " SELECT $1, unnest($2::uuid[])",
            row["id"],
            list(chosen),
        )
    return Approval(
        id=row["id"],
        account_id=account_id,
        client_id=client_id,
        generation=row["generation"],
        scopes=scope_set,
        expires_at=row["expires_at"],
        workspace_ids=chosen,
    )


_GRANT = """
    INSERT INTO approvals (id, account_id, client_id, scopes, expires_at)
    VALUES ($1, $2, $3, $4, now() + $5)
    ON CONFLICT (account_id, client_id) DO UPDATE
       SET generation = approvals.generation + 1, scopes = EXCLUDED.scopes,
           expires_at = EXCLUDED.expires_at, idp_issuer = NULL, revoked_at = NULL,
           revoked_reason = NULL, updated_at = now()
    RETURNING id, generation, expires_at
"""
# A grant through an IdP: the same upsert, naming the IdP; the generation moves only when
# the approval was revoked or its scopes or workspaces change.
_GRANT_THROUGH_IDP = """
    INSERT INTO approvals (id, account_id, client_id, scopes, expires_at, idp_issuer)
    VALUES ($1, $2, $3, $4, now() + $5, $6)
    ON CONFLICT (account_id, client_id) DO UPDATE
       SET generation = approvals.generation + CASE
               WHEN approvals.revoked_at IS NULL AND approvals.scopes = EXCLUDED.scopes
                AND (SELECT coalesce(array_agg(aw.workspace_id ORDER BY aw.workspace_id), '{}')
                       FROM approval_workspaces aw WHERE aw.approval_id = approvals.id)
                    = $7::uuid[]
               THEN 0 ELSE 1 END,
           scopes = EXCLUDED.scopes, expires_at = EXCLUDED.expires_at,
           idp_issuer = EXCLUDED.idp_issuer, revoked_at = NULL, revoked_reason = NULL,
           updated_at = now()
    RETURNING id, generation, expires_at
"""


def locked_approval(row: asyncpg.Record) -> Approval:
    """The approval a row of `LOCKED_APPROVAL_COLUMNS` stands for, enough to issue its tokens
    (its workspaces are not read: tokens do not carry them)."""
    return Approval(
        id=row["id"],
        account_id=row["account_id"],
        client_id=row["client_id"],
        generation=row["generation"],
        scopes=tuple(row["scopes"]),
        expires_at=row["expires_at"],
        workspace_ids=(),
    )


async def issue_tokens(
    conn: asyncpg.Connection,
    tokens: TokenService,
    approval: Approval,
    *,
    scopes: frozenset[str] | None = None,
) -> IssuedTokens:
    """A fresh access token and refresh token for the approval's current generation. The
    access token carries `scopes` (a refresh's narrower ask, RFC 6749 §6) within the
    approval's, else all of them; the refresh token is the approval's and keeps them all."""
    carried = (
        approval.scopes if scopes is None else tuple(s for s in approval.scopes if s in scopes)
    )
    refresh = new_refresh_token()
    await conn.execute(
        "INSERT INTO refresh_tokens (token_hash, approval_id, generation, expires_at)"
        " VALUES ($1, $2, $3, $4)",
        hash_refresh_token(refresh),
        approval.id,
        approval.generation,
        approval.expires_at,
    )
    access, expires_in = tokens.issue_access_token(
        account_id=approval.account_id,
        client_id=approval.client_id,
        scopes=carried,
        approval_id=approval.id,
        generation=approval.generation,
        not_after=approval.expires_at.timestamp(),
    )
    return IssuedTokens(
        approval.id, access, refresh, expires_in, " ".join(carried), approval.account_id
    )


# What redeeming a grant (refresh token here, authorization code in oauth/codes.py) reads
# from the approval row it locks: `locked_approval` turns such a row into an Approval.
LOCKED_APPROVAL_COLUMNS = """id, account_id, client_id, generation, scopes, expires_at,
           revoked_at IS NOT NULL AS revoked, expires_at <= now() AS expired"""
_LOCK_APPROVAL_OF_TOKEN = f"""
    SELECT {LOCKED_APPROVAL_COLUMNS}
      FROM approvals
     WHERE id = (SELECT approval_id FROM refresh_tokens WHERE token_hash = $1)
       FOR UPDATE
"""
_TOKEN_STATE = """
    SELECT generation, used_at IS NOT NULL AS used, expires_at <= now() AS expired
      FROM refresh_tokens WHERE token_hash = $1
"""


async def rotate_refresh_token(
    conn: asyncpg.Connection,
    tokens: TokenService,
    token: str,
    *,
    client_id: str | None = None,
    scopes: frozenset[str] | None = None,
) -> IssuedTokens:
    """Trade a refresh token for new tokens, once.

    Presenting a used token revokes the whole approval (its token family): whoever holds
    the newer tokens — the client or a thief — loses them on the next call, and the account
    must approve again. A token of an older generation is refused without revoking, because
    a re-approval legitimately leaves earlier tokens behind. Never extends the expiry.
    With `client_id` (the token endpoint's caller), a token issued to another client is
    refused without being used.

    With `scopes` (the token endpoint's `scope`, RFC 6749 §6) the new access token carries
    only those; one the approval does not grant is `ScopeRefused`, the token left unused.
    The new refresh token keeps the approval's full scope, as the RFC has it: a later
    refresh without `scope` gets every scope back.
    """
    digest = hash_refresh_token(token)
    refusal: GrantRefused | ScopeRefused | None = None
    issued: IssuedTokens | None = None
    async with conn.transaction():
        # The approval row lock makes every use of the family take turns; the token's state
        # is read after the lock, so a concurrent use that committed first is seen as used.
        approval = await conn.fetchrow(_LOCK_APPROVAL_OF_TOKEN, digest)
        state = await conn.fetchrow(_TOKEN_STATE, digest) if approval else None
        if approval is None or state is None:
            refusal = GrantRefused("the refresh token is unknown")
        elif client_id is not None and approval["client_id"] != client_id:
            refusal = GrantRefused("the refresh token was issued to another client")
        elif state["generation"] != approval["generation"]:
            refusal = GrantRefused("the refresh token was replaced by a newer approval")
        elif approval["revoked"]:
            refusal = GrantRefused("the approval was revoked")
        elif state["used"]:
            await _revoke(conn, approval["id"], "refresh_reuse")
            refusal = RefreshReused(
                "the refresh token was already used; the approval is revoked for safety",
                approval["id"],
            )
        elif approval["expired"] or state["expired"]:
            refusal = GrantRefused("the approval has expired")
        elif scopes is not None and not scopes <= set(approval["scopes"]):
            refusal = ScopeRefused(f"the approval grants only: {' '.join(approval['scopes'])}")
        else:
            await conn.execute(
                "UPDATE refresh_tokens SET used_at = now() WHERE token_hash = $1", digest
            )
            issued = await issue_tokens(conn, tokens, locked_approval(approval), scopes=scopes)
    # Raised after the commit: a reuse must leave the approval revoked.
    if refusal is not None:
        raise refusal
    assert issued is not None
    return issued


async def _revoke(conn: asyncpg.Connection, approval_id: uuid.UUID, reason: str) -> bool:
    done = await conn.fetchval(
        "UPDATE approvals SET revoked_at = now(), revoked_reason = $2, updated_at = now()"
        " WHERE id = $1 AND revoked_at IS NULL RETURNING true",
        approval_id,
        reason,
    )
    return bool(done)


async def revoke_approval(
    conn: asyncpg.Connection, approval_id: uuid.UUID, *, reason: str = "operator"
) -> bool:
    """Revoke an approval: its tokens fail from the next call on. False if nothing changed."""
    return await _revoke(conn, approval_id, reason)


async def approval_client_id(
    conn: asyncpg.Connection | asyncpg.Pool, approval_id: uuid.UUID
) -> str:
    """The OAuth client an approval belongs to (the `client_id` its refresh tokens need)."""
    client_id = await conn.fetchval("SELECT client_id FROM approvals WHERE id = $1", approval_id)
    if client_id is None:
        raise ApprovalRefused("no such approval")
    return str(client_id)
