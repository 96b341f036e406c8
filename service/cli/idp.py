"""`elova-mcp idp`: the identity providers trusted for enterprise-managed authorization.

    elova-mcp idp add --issuer ISSUER --jwks-uri URI --domain DOMAIN
                      [--client CLIENT_ID …] [--workspace WORKSPACE_ID …] [--expires 1d|7d|30d]
    elova-mcp idp list [--json]
    elova-mcp idp remove --issuer ISSUER

Exit 0, or 2 with one line on stderr for input to change (a duplicate `add` says how to
change the IdP). `remove` revokes every approval granted through the IdP; their tokens fail
on the next call. The admin's guide: docs/enterprise-admins.md.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

import asyncpg
import msgspec

from service.audit.oauth_events import approvals_revoked_by_idp_removal
from service.auth.enterprise.trusted_idps import add_idp, list_idps, remove_idp
from service.cli.database_command import run_on_database
from service.config import Config
from service.errors import IdpRefused

_PROG = "elova-mcp idp"
_HELP = "trust, list or remove an identity provider for enterprise-managed authorization"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("idp", help=_HELP, description=_HELP + " (docs/enterprise-admins.md)")
    actions = p.add_subparsers(dest="idp_action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="trust an IdP for the accounts of one email domain")
    add.add_argument("--issuer", required=True, help="the IdP's issuer (an https URL)")
    add.add_argument("--jwks-uri", required=True, help="where the IdP publishes its keys")
    add.add_argument("--domain", required=True, help="the email domain it speaks for")
    add.add_argument("--client", action="append", default=[], metavar="CLIENT_ID",
                     help="a client it may grant (repeat; default any)")  # fmt: skip
    add.add_argument("--workspace", action="append", default=[], metavar="WORKSPACE_ID",
                     help="a workspace its approvals cover (repeat; default all)")  # fmt: skip
    add.add_argument("--expires", default="1d", metavar="1d|7d|30d",
                     help="its approvals' lifetime (default 1d)")  # fmt: skip
    listing = actions.add_parser("list", help="list the trusted IdPs")
    listing.add_argument("--json", action="store_true", help="one JSON object")
    remove = actions.add_parser("remove", help="stop trusting an IdP, revoke its approvals")
    remove.add_argument("--issuer", required=True, help="the IdP's issuer")


def _workspace(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise IdpRefused(f"--workspace {raw!r} is not a workspace id (a UUID)") from None


def _table(idps: list[dict[str, object]]) -> str:
    if not idps:
        return "no trusted IdP; add one with `elova-mcp idp add`"
    lines = []
    for idp in idps:
        clients = ", ".join(idp["clients"]) or "any client"  # type: ignore[arg-type]
        workspaces = ", ".join(idp["workspaces"]) or "all memberships"  # type: ignore[arg-type]
        lines.append(
            f"{idp['issuer']}  domain {idp['domain']}  keys {idp['jwksUri']}  clients:"
            f" {clients}  workspaces: {workspaces}  approvals last {idp['expires']}"
        )
    return "\n".join(lines)


async def _command(conn: asyncpg.Connection, cfg: Config, args: argparse.Namespace) -> str:
    if args.idp_action == "add":
        idp = await add_idp(
            conn,
            issuer=args.issuer,
            jwks_uri=args.jwks_uri,
            domain=args.domain,
            client_ids=tuple(args.client),
            workspace_ids=tuple(_workspace(w) for w in args.workspace),
            expires=args.expires,
        )
        return msgspec.json.encode(idp.as_json()).decode()
    if args.idp_action == "list":
        idps = [idp.as_json() for idp in await list_idps(conn)]
        return msgspec.json.encode({"idps": idps}).decode() if args.json else _table(idps)
    revoked = await remove_idp(conn, args.issuer)
    await approvals_revoked_by_idp_removal(cfg, args.issuer, revoked)
    return msgspec.json.encode(
        {"issuer": args.issuer, "removed": True, "approvalsRevoked": len(revoked)}
    ).decode()


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env(need_key=False)

    async def command(conn: asyncpg.Connection) -> str:
        return await _command(conn, cfg, args)

    return asyncio.run(run_on_database(_PROG, cfg.database_url, command))
