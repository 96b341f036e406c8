"""Registered OAuth clients: lookup, and the redirect-URI rules every client obeys.

Redirect URIs follow RFC 8252 and OAuth 2.1: `https` on any host; `http` only on a loopback
host (`127.0.0.1` and the rest of 127/8, `[::1]`, `localhost`); or a private-use scheme of a
native app (`cursor://…`, `vscode://…`, `com.example.app:/cb`). Never `javascript:`, `data:`,
`file:` and the other schemes a browser runs or reads locally, never a fragment or user
information. An authorization request must name one of the client's registered URIs
exactly (string comparison, no normalising), except that the port of a loopback `http` URI
may differ (RFC 8252 §7.3: native apps listen on whatever port is free); scheme, host, path
and query still match exactly.

Clients are registered (`dynamic`, RFC 7591), made by the operator (`operator`), or known by
their Client ID Metadata Document (`metadata`: the client id is the document's https URL;
`service.auth.oauth.cimd` fetches it and keeps the row current).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

import asyncpg

MAX_REDIRECT_URI_LENGTH = 2000
LOOPBACK_NAMES = frozenset({"localhost"})
# Schemes a browser executes, reads locally or cannot hand to an application.
REFUSED_SCHEMES = frozenset(
    {"javascript", "data", "file", "vbscript", "blob", "about", "filesystem", "view-source",
     "ws", "wss", "ftp"}
)  # fmt: skip
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
CLIENT_COLUMNS = (
    "client_id, client_name, redirect_uris, grant_types, scope, kind,"
    " token_endpoint_auth_method, client_secret_hash"
)


@dataclass(frozen=True, slots=True)
class Client:
    client_id: str
    client_name: str
    redirect_uris: tuple[str, ...]
    grant_types: tuple[str, ...]
    scope: str | None
    kind: str = "dynamic"
    auth_method: str = "none"
    secret_hash: bytes | None = None

    @property
    def confidential(self) -> bool:
        return self.auth_method != "none"


def client_of(row: asyncpg.Record) -> Client:
    return Client(
        client_id=row["client_id"],
        client_name=row["client_name"],
        redirect_uris=tuple(row["redirect_uris"]),
        grant_types=tuple(row["grant_types"]),
        scope=row["scope"],
        kind=row["kind"],
        auth_method=row["token_endpoint_auth_method"],
        secret_hash=row["client_secret_hash"],
    )


def is_loopback_host(host: str) -> bool:
    host = host.strip("[]")
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
    scheme = parts.scheme
    if not scheme or not _SCHEME.fullmatch(scheme) or not uri.startswith(scheme + ":"):
        return f"{uri!r} must be an absolute URI: https, http on a loopback host, or an app scheme"
    if scheme in REFUSED_SCHEMES:
        return f"{uri!r} uses the {scheme}: scheme, which cannot be a redirect URI"
    if parts.fragment or "#" in uri:
        return f"{uri!r} must not contain a fragment"
    if parts.username is not None or parts.password is not None:
        return f"{uri!r} must not contain user information"
    if scheme in ("https", "http"):
        if not host:
            return f"{uri!r} must name a host"
        if scheme == "http" and not is_loopback_host(host):
            return f"{uri!r} uses http on a host that is not loopback; use https"
        return None
    if not (parts.netloc or parts.path):
        return f"{uri!r} must name a target after the scheme"
    return None


def _loopback_http(uri: str) -> bool:
    parts = urlsplit(uri)
    return parts.scheme == "http" and is_loopback_host(parts.hostname or "")


def _without_port(uri: str) -> tuple[str, str, str, str]:
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    return parts.scheme, host, parts.path, parts.query


def matches_registered(asked: str, registered: tuple[str, ...]) -> bool:
    """`asked` is one of the `registered` URIs, byte for byte, or a loopback http one of
    them with another port (RFC 8252 §7.3)."""
    if asked in registered:
        return True
    if redirect_uri_problem(asked) is not None or not _loopback_http(asked):
        return False
    try:
        key = _without_port(asked)
        urlsplit(asked).port  # noqa: B018 - a malformed port never matches
    except ValueError:
        return False
    return any(_loopback_http(r) and _without_port(r) == key for r in registered)


def redirect_origin(uri: str) -> str:
    """The CSP source of a redirect URI (for the page's `form-action`): scheme://host[:port]
    for http(s), the bare scheme (`cursor:`) for an app scheme."""
    parts = urlsplit(uri)
    if parts.scheme in ("https", "http"):
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


def redirect_host(uri: str) -> str:
    """What a person is told the browser returns to: the host (and port) of an http(s) URI,
    the scheme and target of an app's URI (`cursor://anysphere.cursor-mcp`)."""
    parts = urlsplit(uri)
    if parts.scheme in ("https", "http"):
        return parts.netloc
    if parts.netloc:
        return f"{parts.scheme}://{parts.netloc}"
    return f"{parts.scheme}:"


def is_app_scheme(uri: str) -> bool:
    return urlsplit(uri).scheme not in ("https", "http")


async def load_client(
    conn: asyncpg.Connection | asyncpg.Pool, client_id: str, *, operator: bool = False
) -> Client | None:
    """A stored client that can take part in the browser flow (registered or known by its
    metadata document).

    With `operator=True`, also the clients `elova-mcp approve` creates: they have no redirect
    URI and registered only the refresh_token grant, so they can refresh, never authorize.
    """
    kinds = ["dynamic", "metadata", "operator"] if operator else ["dynamic", "metadata"]
    row = await conn.fetchrow(
        f"SELECT {CLIENT_COLUMNS} FROM oauth_clients WHERE client_id = $1"
        " AND kind = ANY($2::text[])",
        client_id,
        kinds,
    )
    return None if row is None else client_of(row)
