"""Granting approvals (the rules the operator command and the approval page share) and
refresh-token rotation: once only, reuse revokes the family, expiry never extends."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest

from service.auth.approvals import (
    create_operator_client,
    grant_approval,
    rotate_refresh_token,
)
from service.auth.refresh_tokens import hash_refresh_token
from service.auth.tokens import TokenService
from service.errors import ApprovalRefused, GrantRefused
from tests.auth.helpers import AuthApp, SeedFn
from tests.support.approvals import Member, granted


async def _grant(pool: asyncpg.Pool, who: Member, **kw: Any) -> Any:
    async with pool.acquire() as conn:
        args: dict[str, Any] = {
            "account_id": who.account_id,
            "workspace_ids": who.workspaces,
            "scopes": "workspaces:read n8n:read",
            "expires": "7d",
        }
        args.update(kw)
        if "client_id" not in args:
            args["client_id"] = await create_operator_client(conn, "t")
        return await grant_approval(conn, **args)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"account_id": uuid.UUID(int=7)}, "no account"),
        ({"client_id": "no-such-client"}, "no registered client"),
        ({"workspace_ids": []}, "at least one workspace"),
        ({"scopes": "workspaces:read admin"}, "unknown scope admin"),
        ({"scopes": ""}, "at least one scope"),
        ({"expires": "2d"}, "expiry '2d' is not offered"),
        ({"expires": "90d"}, "expiry '90d' is not offered"),
    ],
)
async def test_refusals(
    db_pool: asyncpg.Pool, seed: SeedFn, change: dict[str, Any], message: str
) -> None:
    who = await seed(1)
    with pytest.raises(ApprovalRefused, match=message):
        await _grant(db_pool, who, **change)
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM approvals WHERE account_id = $1", who.account_id
        )
        == 0
    )


async def test_workspace_not_a_member_of(db_pool: asyncpg.Pool, seed: SeedFn) -> None:
    who = await seed(2)
    with pytest.raises(ApprovalRefused, match=f"not a member of workspace {who.foreign_workspace}"):
        await _grant(db_pool, who, workspace_ids=[*who.workspaces, who.foreign_workspace])
    unknown = uuid.uuid4()
    with pytest.raises(ApprovalRefused, match=str(unknown)):
        await _grant(db_pool, who, workspace_ids=[unknown])


async def test_fifty_workspaces_at_most(db_pool: asyncpg.Pool, seed: SeedFn) -> None:
    who = await seed(51)
    with pytest.raises(ApprovalRefused, match="at most 50 workspaces, not 51"):
        await _grant(db_pool, who)
    approval = await _grant(db_pool, who, workspace_ids=who.workspaces[:50] + who.workspaces[:3])
    assert len(approval.workspace_ids) == 50  # repeats count once


async def test_hundred_and_first_active_approval_is_refused(
    db_pool: asyncpg.Pool, seed: SeedFn
) -> None:
    who = await seed(1)
    async with db_pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO oauth_clients (client_id, client_name, kind)"
            " SELECT $1 || n, 'bulk', 'operator' FROM generate_series(1, 102) AS n",
            who.account_id.hex,
        )
        # 100 active, one revoked and one expired: those two do not count.
        await conn.execute(
            """INSERT INTO approvals (id, account_id, client_id, scopes, expires_at, revoked_at)
               SELECT gen_random_uuid(), $1, $2 || n, '{n8n:read}',
                      CASE WHEN n = 102 THEN now() - interval '1 hour'
                           ELSE now() + interval '1 day' END,
                      CASE WHEN n = 101 THEN now() END
                 FROM generate_series(1, 102) AS n""",
            who.account_id,
            who.account_id.hex,
        )
    with pytest.raises(ApprovalRefused, match="100 active approvals.*--revoke"):
        await _grant(db_pool, who)
    # Re-approving one of the 100 is not a new active approval.
    again = await _grant(db_pool, who, client_id=who.account_id.hex + "1")
    assert again.generation == 2
    # Re-approving the revoked one would make it the 101st.
    with pytest.raises(ApprovalRefused, match="100 active"):
        await _grant(db_pool, who, client_id=who.account_id.hex + "101")


async def test_reapproval_updates_and_increments_generation(
    db_pool: asyncpg.Pool, seed: SeedFn
) -> None:
    who = await seed(3)
    first = await _grant(db_pool, who, expires="1d")
    await db_pool.execute(
        "UPDATE approvals SET revoked_at = now(), revoked_reason = 'user' WHERE id = $1", first.id
    )
    second = await _grant(
        db_pool,
        who,
        client_id=first.client_id,
        workspace_ids=[who.workspaces[2]],
        scopes="n8n:read",
        expires="30d",
    )
    assert (second.id, second.generation) == (first.id, 2)
    row = await db_pool.fetchrow(
        "SELECT scopes, revoked_at, expires_at - created_at AS left FROM approvals WHERE id = $1",
        first.id,
    )
    assert row["scopes"] == ["n8n:read"] and row["revoked_at"] is None
    assert row["left"].days in (29, 30)
    workspaces = await db_pool.fetch(
        "SELECT workspace_id FROM approval_workspaces WHERE approval_id = $1", first.id
    )
    assert [r["workspace_id"] for r in workspaces] == [who.workspaces[2]]


async def test_refresh_token_is_stored_hashed_and_works_once(
    db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn, auth_app: AuthApp
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    assert len(issued.refresh_token) >= 43  # 32 random bytes, base64url
    stored = await db_pool.fetch(
        "SELECT token_hash FROM refresh_tokens WHERE approval_id = $1", approval.id
    )
    assert [r["token_hash"] for r in stored] == [hash_refresh_token(issued.refresh_token)]

    async with db_pool.acquire() as conn:
        rotated = await rotate_refresh_token(conn, tokens, issued.refresh_token)
    assert rotated.refresh_token != issued.refresh_token
    assert rotated.approval_id == approval.id
    headers = {"Authorization": f"Bearer {rotated.access_token}"}
    assert (await auth_app.client.get("/mcp", headers=headers)).status == 200

    # A second use of the first token revokes the whole family, newer tokens included.
    async with db_pool.acquire() as conn:
        with pytest.raises(GrantRefused, match="already used"):
            await rotate_refresh_token(conn, tokens, issued.refresh_token)
        with pytest.raises(GrantRefused, match="revoked"):
            await rotate_refresh_token(conn, tokens, rotated.refresh_token)
    assert (await auth_app.client.get("/mcp", headers=headers)).status == 401
    reason = await db_pool.fetchval(
        "SELECT revoked_reason FROM approvals WHERE id = $1", approval.id
    )
    assert reason == "refresh_reuse"


async def test_concurrent_double_use_succeeds_at_most_once(
    db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    conns = [await db_pool.acquire() for _ in range(3)]
    try:
        results = await asyncio.gather(
            *(rotate_refresh_token(c, tokens, issued.refresh_token) for c in conns),
            return_exceptions=True,
        )
    finally:
        for c in conns:
            await db_pool.release(c)
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(r, GrantRefused) for r in losers) and len(losers) == 2
    # The losers were reuses: the family is revoked, the winner's tokens included.
    assert await db_pool.fetchval(
        "SELECT revoked_at IS NOT NULL FROM approvals WHERE id = $1", approval.id
    )
    async with db_pool.acquire() as conn:
        with pytest.raises(GrantRefused):
            await rotate_refresh_token(conn, tokens, winners[0].refresh_token)


async def test_refresh_never_extends_the_approval(
    db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    approval, issued = await granted(db_pool, tokens, who)
    # Ten seconds are left on the approval: the new access token lives no longer.
    await db_pool.execute(
        "UPDATE approvals SET expires_at = now() + interval '10 seconds' WHERE id = $1",
        approval.id,
    )
    async with db_pool.acquire() as conn:
        rotated = await rotate_refresh_token(conn, tokens, issued.refresh_token)
    assert rotated.expires_in <= 10
    after = await db_pool.fetchrow(
        """SELECT a.expires_at AS approval, r.expires_at AS token
             FROM approvals a JOIN refresh_tokens r ON r.approval_id = a.id
            WHERE r.token_hash = $1""",
        hash_refresh_token(rotated.refresh_token),
    )
    assert after["token"] <= after["approval"]
    await db_pool.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1",
        approval.id,
    )
    async with db_pool.acquire() as conn:
        with pytest.raises(GrantRefused, match="expired"):
            await rotate_refresh_token(conn, tokens, rotated.refresh_token)


async def test_older_generation_refresh_token_is_refused_without_revoking(
    db_pool: asyncpg.Pool, tokens: TokenService, seed: SeedFn
) -> None:
    who = await seed(1)
    first, old = await granted(db_pool, tokens, who)
    _, new = await granted(db_pool, tokens, who, client_id=first.client_id)
    async with db_pool.acquire() as conn:
        with pytest.raises(GrantRefused, match="newer approval"):
            await rotate_refresh_token(conn, tokens, old.refresh_token)
        assert (await rotate_refresh_token(conn, tokens, new.refresh_token)).approval_id == first.id
        with pytest.raises(GrantRefused, match="unknown"):
            await rotate_refresh_token(conn, tokens, "not-a-token")
