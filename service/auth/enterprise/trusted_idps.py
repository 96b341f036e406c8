"""Trusted identity providers: which IdP speaks for the accounts of which email domain, for
which clients and workspaces, and for how long its approvals last (`elova-mcp idp`).

`add_idp` and `remove_idp` are the operator's; `load_idp` is the grant's. Removing an IdP
revokes every approval granted through it (reason `operator`: the operator ran it), so
their tokens fail on the next call, and forgets its subjects' bindings.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

from service.auth.approvals import EXPIRY_CHOICES
from service.auth.clients.registry import is_loopback_host
from service.errors import IdpRefused

MAX_URL_LENGTH = 1000
_DOMAIN = re.compile(r"(?=.{1,253}$)([a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")
_COLUMNS = "issuer, jwks_uri, domain, client_ids, workspace_ids, expires, created_at"


@dataclass(frozen=True, slots=True)
class TrustedIdp:
    issuer: str
    jwks_uri: str
    domain: str
    client_ids: tuple[str, ...]  # empty: any client
    workspace_ids: tuple[uuid.UUID, ...]  # empty: all of the account's memberships
    expires: str

    def as_json(self) -> dict[str, object]:
        return {
            "issuer": self.issuer,
            "jwksUri": self.jwks_uri,
            "domain": self.domain,
            "clients": list(self.client_ids),
            "workspaces": [str(w) for w in self.workspace_ids],
            "expires": self.expires,
        }


def _idp(row: asyncpg.Record) -> TrustedIdp:
    issuer, jwks_uri, domain, clients, workspaces, expires = tuple(row.values())[:6]
    return TrustedIdp(issuer, jwks_uri, domain, tuple(clients), tuple(workspaces), expires)


def issuer_problem(issuer: str) -> str | None:
    """Why `issuer` is not an IdP issuer identifier (an https URL, no query or fragment)."""
    if len(issuer) > MAX_URL_LENGTH or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in issuer):
        return f"--issuer must be an https URL of at most {MAX_URL_LENGTH} characters"
    parts = urlsplit(issuer)
    if parts.scheme != "https" or not parts.hostname or parts.query or parts.fragment:
        return f"--issuer {issuer!r} must be an https URL without query or fragment"
    if "@" in parts.netloc:
        return "--issuer must not contain user information"
    return None


def jwks_uri_problem(uri: str) -> str | None:
    """Why `uri` cannot be an IdP's JWKS location (https; http only on a loopback host)."""
    if len(uri) > MAX_URL_LENGTH or any(ord(c) <= 0x20 or ord(c) == 0x7F for c in uri):
        return f"--jwks-uri must be a URL of at most {MAX_URL_LENGTH} characters"
    parts = urlsplit(uri)
    if not parts.hostname or "@" in parts.netloc or parts.fragment:
        return f"--jwks-uri {uri!r} must be an https URL with a host and no fragment"
    if parts.scheme == "https" or (parts.scheme == "http" and is_loopback_host(parts.hostname)):
        return None
    return f"--jwks-uri {uri!r} must use https (plain http only on a loopback host)"


def normal_domain(domain: str) -> str:
    """The email domain in lower case, or IdpRefused."""
    lowered = domain.strip().lower()
    if not _DOMAIN.fullmatch(lowered):
        raise IdpRefused(f"--domain {domain!r} is not a domain name such as example.com")
    return lowered


async def add_idp(
    conn: asyncpg.Connection,
    *,
    issuer: str,
    jwks_uri: str,
    domain: str,
    client_ids: tuple[str, ...] = (),
    workspace_ids: tuple[uuid.UUID, ...] = (),
    expires: str = "1d",
) -> TrustedIdp:
    """Trust an IdP, or IdpRefused with one line saying why not."""
    problem = issuer_problem(issuer) or jwks_uri_problem(jwks_uri)
    if problem:
        raise IdpRefused(problem)
    if expires not in EXPIRY_CHOICES:
        raise IdpRefused(f"--expires {expires!r} is not offered; choose 1d, 7d or 30d")
    clients = tuple(dict.fromkeys(client_ids))
    workspaces = tuple(dict.fromkeys(workspace_ids))
    row = await conn.fetchrow(
        f"INSERT INTO trusted_idps ({_COLUMNS.removesuffix(', created_at')})"
        " VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (issuer) DO NOTHING"
        f" RETURNING {_COLUMNS}",
        issuer, jwks_uri, normal_domain(domain), list(clients), list(workspaces), expires,
    )  # fmt: skip
    if row is None:
        raise IdpRefused(
            f"the IdP {issuer} is already trusted; to change it, run"
            f" `elova-mcp idp remove --issuer {issuer}` and add it again"
        )
    return _idp(row)


async def list_idps(conn: asyncpg.Connection) -> list[TrustedIdp]:
    rows = await conn.fetch(f"SELECT {_COLUMNS} FROM trusted_idps ORDER BY issuer")
    return [_idp(r) for r in rows]


async def load_idp(conn: asyncpg.Connection, issuer: str) -> TrustedIdp | None:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM trusted_idps WHERE issuer = $1", issuer)
    return None if row is None else _idp(row)


async def remove_idp(conn: asyncpg.Connection, issuer: str) -> list[uuid.UUID]:
    """Stop trusting the IdP and revoke every approval granted through it (the ids revoked),
    or IdpRefused when it is not trusted."""
    async with conn.transaction():
        gone = await conn.fetchval(
            "DELETE FROM trusted_idps WHERE issuer = $1 RETURNING true", issuer
        )
        if not gone:
            raise IdpRefused(f"no trusted IdP has issuer {issuer}; see `elova-mcp idp list`")
        rows = await conn.fetch(
            "UPDATE approvals SET revoked_at = now(), revoked_reason = 'operator',"
            " updated_at = now() WHERE idp_issuer = $1 AND revoked_at IS NULL RETURNING id",
            issuer,
        )
    return [r["id"] for r in rows]
