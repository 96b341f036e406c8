"""`elova-mcp approve`: the operator grants an account's approval and gets its tokens.

    elova-mcp approve --account EMAIL --workspace UUID [--workspace UUID …]
                      [--scope "workspaces:read n8n:read"] [--expires 1d|7d|30d]
                      [--client-name NAME | --client-id ID]
    elova-mcp approve --list --account EMAIL
    elova-mcp approve --revoke APPROVAL_ID

Granting prints one JSON object on stdout (`ApproveOutput`); flags of two forms exit 2. The
forms, the output and the exit statuses: docs/decisions/ops.md, "`elova-mcp approve`".
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from service.audit.oauth_events import approval_revoked_by_operator, consent_granted_by_operator
from service.auth.approval_listing import list_active_approvals
from service.auth.approvals import (
    IssuedTokens,
    approval_client_id,
    create_operator_client,
    grant_approval,
    issue_tokens,
    revoke_approval,
)
from service.auth.caller import ALL_SCOPES
from service.auth.tokens import TokenService
from service.cli.database_command import refuse, run_on_database
from service.config import Config
from service.errors import ApprovalRefused

DEFAULT_CLIENT_NAME = "elova-mcp approve"
DEFAULT_EXPIRY = "7d"
_PROG = "elova-mcp approve"


class ApproveOutput(msgspec.Struct, rename="camel"):
    approval_id: str
    client_id: str
    access_token: str
    refresh_token: str
    expires_in: int


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "approve",
        help="approve an account's access for a client and print its tokens",
        description="Grant (or with --list / --revoke, inspect or end) an approval.",
        epilog=(
            "three forms, each with only its own flags:\n"
            "  approve --account EMAIL --workspace UUID [...] [--scope S] [--expires E]\n"
            "          [--client-name NAME | --client-id ID]\n"
            "  approve --list --account EMAIL\n"
            "  approve --revoke APPROVAL_ID\n"
            "granting prints approvalId, clientId, accessToken, refreshToken, expiresIn;\n"
            "flags of two forms together exit 2."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--account", metavar="EMAIL", help="the account's email")
    p.add_argument(
        "--workspace", metavar="UUID", action="append", default=[], help="repeat for each"
    )
    p.add_argument(
        "--scope",
        metavar="SCOPES",
        help=f'space-separated scopes (default "{" ".join(ALL_SCOPES)}")',
    )
    p.add_argument("--expires", metavar="1d|7d|30d", help=f"default {DEFAULT_EXPIRY}")
    p.add_argument(
        "--client-name",
        metavar="NAME",
        help=f'a new operator client (default "{DEFAULT_CLIENT_NAME}")',
    )
    p.add_argument("--client-id", metavar="ID", help="approve this registered client instead")
    p.add_argument("--list", action="store_true", help="list the account's active approvals")
    p.add_argument("--revoke", metavar="APPROVAL_ID", help="revoke this approval")


# The flags of granting; --list and --revoke take none of them.
_GRANT_FLAGS = ("workspace", "scope", "expires", "client_name", "client_id")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def conflict(args: argparse.Namespace) -> str | None:
    """Why these flags cannot go together (or a required one is missing); None when fine."""
    for name in ("account", "scope", "expires", "client_name", "client_id", "revoke"):
        value = getattr(args, name)
        if value is not None and not value.strip():
            return f"{_flag(name)} is empty; give a value or leave the flag out"
    given = [name for name in _GRANT_FLAGS if getattr(args, name) not in (None, [])]
    if args.list and args.revoke is not None:
        return "--list and --revoke are separate commands; give one of them"
    for action in ("list", "revoke"):
        if getattr(args, action) not in (None, False) and given:
            return f"--{action} takes no {_flag(given[0])}; it only {_ACTS[action]}"
    if args.revoke and args.account:
        return "--revoke takes only the approval id, not --account"
    if args.client_name and args.client_id:
        return (
            "give --client-name (a new operator client) or --client-id (an existing client), "
            "not both"
        )
    if not args.revoke and not args.account:
        return "--account is required"
    if not (args.list or args.revoke or args.workspace):
        return "--workspace is required (repeat it for each workspace)"
    return None


_ACTS = {"list": "lists an account's approvals", "revoke": "revokes one approval"}


def _parse_uuid(raw: str, what: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        article = "an" if what[:1] in "aeiou" else "a"
        raise ApprovalRefused(f"{raw!r} is not {article} {what} id (a UUID)") from None


async def _account_id(conn: asyncpg.Connection, email: str) -> uuid.UUID:
    found: uuid.UUID | None = await conn.fetchval(
        "SELECT id FROM accounts WHERE lower(email) = lower($1)", email
    )
    if found is None:
        raise ApprovalRefused(f"no account with email {email}")
    return found


async def approve(
    db: asyncpg.Pool | asyncpg.Connection,
    cfg: Config,
    *,
    account: str,
    workspaces: Sequence[str | uuid.UUID],
    scope: str = " ".join(ALL_SCOPES),
    expires: str = DEFAULT_EXPIRY,
    client_name: str = DEFAULT_CLIENT_NAME,
    client_id: str | None = None,
    tokens: TokenService | None = None,
) -> IssuedTokens:
    """Grant an approval for the account (by email) and issue its first tokens.

    Everything happens in one transaction: a refusal leaves no client or approval behind.
    """
    ids = [w if isinstance(w, uuid.UUID) else _parse_uuid(w, "workspace") for w in workspaces]
    tokens = tokens or TokenService(cfg)
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            return await _approve(
                conn, tokens, account, ids, scope, expires, client_name, client_id
            )
    return await _approve(db, tokens, account, ids, scope, expires, client_name, client_id)


async def _approve(
    conn: asyncpg.Connection,
    tokens: TokenService,
    account: str,
    workspace_ids: list[uuid.UUID],
    scope: str,
    expires: str,
    client_name: str,
    client_id: str | None,
) -> IssuedTokens:
    async with conn.transaction():
        account_id = await _account_id(conn, account)
        if client_id is None:
            client_id = await create_operator_client(conn, client_name)
        approval = await grant_approval(
            conn,
            account_id=account_id,
            client_id=client_id,
            workspace_ids=workspace_ids,
            scopes=scope,
            expires=expires,
        )
        return await issue_tokens(conn, tokens, approval)


def run(args: argparse.Namespace) -> int:
    problem = conflict(args)
    if problem is not None:
        return refuse(_PROG, problem, status=2)
    # Listing and revoking sign nothing, so they work without the signing key.
    cfg = Config.from_env(need_key=not (args.revoke or args.list))

    async def command(conn: asyncpg.Connection) -> str:
        return msgspec.json.encode(await _command(conn, cfg, args)).decode()

    return asyncio.run(
        run_on_database(_PROG, cfg.database_url, command, refusals=(ApprovalRefused,))
    )


async def _command(conn: asyncpg.Connection, cfg: Config, args: argparse.Namespace) -> Any:
    if args.revoke:
        approval_id = _parse_uuid(args.revoke, "approval")
        if not await revoke_approval(conn, approval_id, reason="operator"):
            raise ApprovalRefused(f"no unrevoked approval with id {approval_id}")
        await approval_revoked_by_operator(cfg, approval_id)
        return {"approvalId": str(approval_id), "revoked": True}
    if args.list:
        account_id = await _account_id(conn, args.account)
        return {"approvals": await list_active_approvals(conn, account_id)}
    issued = await approve(
        conn,
        cfg,
        account=args.account,
        workspaces=args.workspace,
        scope=args.scope or " ".join(ALL_SCOPES),
        expires=args.expires or DEFAULT_EXPIRY,
        client_name=args.client_name or DEFAULT_CLIENT_NAME,
        client_id=args.client_id,
    )
    client_id = await approval_client_id(conn, issued.approval_id)
    workspaces = [_parse_uuid(w, "workspace") for w in args.workspace]
    assert issued.account_id is not None
    await consent_granted_by_operator(
        cfg, issued.account_id, issued.approval_id, client_id, workspaces, issued.scope
    )
    return ApproveOutput(
        approval_id=str(issued.approval_id),
        client_id=client_id,
        access_token=issued.access_token,
        refresh_token=issued.refresh_token,
        expires_in=issued.expires_in,
    )
