"""Registered OAuth clients: lookup, and the redirect-URI rule every client obeys.

A redirect URI is an absolute `https` URI, or `http` on a loopback host (native apps listen
on 127.0.0.1 or localhost), without a fragment or user information. Authorization requests
must name one of the client's registered URIs exactly (string comparison, no normalising).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

MAX_REDIRECT_URI_LENGTH = 2000
LOOPBACK_NAMES = frozenset({"localhost"})


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    client_name: str
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    scope: str | None


def is_loopback_host(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def redirect_uri_problem(uri: str) -> str | None:
    """Why `uri` cannot be a redirect URI, or None when it can."""
    if len(uri) > MAX_REDIRECT_URI_LENGTH:
        return f"a redirect URI is at most {MAX_REDIRECT_URI_LENGTH} characters"
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in uri):
        return "a redirect URI may not contain spaces or control characters"
    try:
        parts = urlsplit(uri)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return f"{uri!r} is not a valid URI"
    if parts.scheme not in ("https", "http") or not host:
        return f"{uri!r} must be an absolute https URI (or http on a loopback host)"
    if parts.fragment or "#" in uri:
        return f"{uri!r} must not contain a fragment"
    if parts.username is not None or parts.password is not None:
        return f"{uri!r} must not contain user information"
    if parts.scheme == "http" and not is_loopback_host(host):
        return f"{uri!r} uses http on a host that is not loopback; use https"
    return None


def redirect_origin(uri: str) -> str:
    """scheme://host[:port] of a registered redirect URI (for the page's CSP and text)."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}"


def redirect_host(uri: str) -> str:
    parts = urlsplit(uri)
    return parts.netloc


async def load_client(
    conn: asyncpg.Connection | asyncpg.Pool, client_id: str, *, operator: bool = False
) -> Client | None:
    """A client that can take part in the browser flow (dynamic registrations only).

    With `operator=True`, also the clients `elova-mcp approve` creates: they have no redirect
    URI and registered only the refresh_token grant, so they can refresh, never authorize.
    """
    kinds = ["dynamic", "operator"] if operator else ["dynamic"]
    row = await conn.fetchrow(
        "SELECT client_id, client_name, redirect_uris, grant_types, scope FROM oauth_clients"
        " WHERE client_id = $1 AND kind = ANY($2::text[])",
        client_id,
        kinds,
    )
    if row is None:
        return None
    return Client(
        client_id=row["client_id"],
        client_name=row["client_name"],
        redirect_uris=tuple(row["redirect_uris"]),
        grant_types=tuple(row["grant_types"]),
        scope=row["scope"],
    )
