"""Granted callers made straight in the database, for tests that need an approval and its
tokens without the approval page or the `approve` command:

    who = await seed_member(pool, workspaces=2)            # account + memberships
    approval, issued = await granted(pool, tokens, who)   # operator client, approval, tokens
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

from service.auth.approvals import (
    Approval,
    IssuedTokens,
    create_operator_client,
    grant_approval,
    issue_tokens,
)
from service.auth.tokens import TokenService


@dataclass
class Member:
    """One account with workspaces it belongs to (and one it does not)."""

    account_id: uuid.UUID
    email: str
    workspaces: list[uuid.UUID]
    foreign_workspace: uuid.UUID


async def seed_member(pool: asyncpg.Pool, *, workspaces: int = 2, role: str = "member") -> Member:
    """A new account, a member (with `role`) of `workspaces` new workspaces; one more new
    workspace it is not a member of. The email has capitals, as people type them."""
    account_id = uuid.uuid4()
    email = f"user-{account_id.hex[:12]}@Example.test"
    member_of = [uuid.uuid4() for _ in range(workspaces)]
    foreign = uuid.uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO accounts (id, email, name) VALUES ($1, $2, 'Test user')",
            account_id,
            email,
        )
        await conn.execute(
            "INSERT INTO workspaces (id, name, time_zone)"
            " SELECT w, 'ws ' || w::text, 'UTC' FROM unnest($1::uuid[]) AS w",
            [*member_of, foreign],
        )
        await conn.execute(
            "INSERT INTO memberships (account_id, workspace_id, role)"
            " SELECT $1, w, $3 FROM unnest($2::uuid[]) AS w",
            account_id,
            member_of,
            role,
        )
    return Member(account_id, email, member_of, foreign)


async def granted(
    pool: asyncpg.Pool,
    tokens: TokenService,
    who: Member,
    *,
    scopes: str = "workspaces:read n8n:read",
    expires: str = "1d",
    client_id: str | None = None,
    workspaces: list[Any] | None = None,
) -> tuple[Approval, IssuedTokens]:
    """Approve `who` (all its workspaces unless `workspaces`) for `client_id`, or for a new
    operator client, and issue the approval's first tokens."""
    async with pool.acquire() as conn, conn.transaction():
        client = client_id or await create_operator_client(conn, "test client")
        approval = await grant_approval(
            conn,
            account_id=who.account_id,
            client_id=client,
            workspace_ids=who.workspaces if workspaces is None else workspaces,
            scopes=scopes,
            expires=expires,
        )
        return approval, await issue_tokens(conn, tokens, approval)
