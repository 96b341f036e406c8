"""Registered OAuth clients: lookup (`Client`, `load_client`), and the redirect-URI rules every
client obeys (RFC 8252 and OAuth 2.1: `redirect_uri_problem`, `matches_registered`).

The rules and why (docs/decisions/oauth.md): "Registration (RFC 7591)" for the URIs a client
may register, "The authorization request" for how a request's URI must match one.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from service.auth.clients.redirect_hosts import ShownHost, ascii_host, shown_host, split_authority

MAX_REDIRECT_URI_LENGTH = 2000
LOOPBACK_NAMES = frozenset({"localhost"})
# Schemes a browser executes, reads locally or cannot hand to an application.
REFUSED_SCHEMES = frozenset(
    {"javascript", "data", "file", "vbscript", "blob", "about", "filesystem", "view-source",
     "ws", "wss", "ftp"}
)  # fmt: skip
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
# The target of an app scheme's URI (`cursor://anysphere.cursor-mcp/...`): RFC 3986
# unreserved characters and an optional port, nothing a page could show misleadingly.
_APP_AUTHORITY = re.compile(r"[A-Za-z0-9._~-]+(:\d{1,5})?")
CLIENT_COLUMNS = (
    "client_id, client_name, redirect_uris, grant_types, scope, kind,"
    " token_endpoint_auth_method, client_secret_hash"
)


@dataclass(frozen=True, slots=True)
class Client:
    """A client: registered (`dynamic`, RFC 7591), made by the operator (`operator`), or known
    by its Client ID Metadata Document (`metadata`: the client id is the document's https
    URL; `service.auth.clients.metadata_documents` fetches it and keeps the row current)."""

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
    """Why `uri` cannot be a redirect URI, or None when it can: `https` on any host; `http`
    only on a loopback host (`127.0.0.1` and the rest of 127/8, `[::1]`, `localhost`); or a
    private-use scheme of a native app (`cursor://…`, `com.example.app:/cb`). Never
    `REFUSED_SCHEMES`, a fragment or user information."""
    refusal = redirect_uri_refusal(uri)
    return None if refusal is None else refusal[1]


def redirect_uri_refusal(uri: str) -> tuple[str, str] | None:
    """(reason, why) `uri` cannot be a redirect URI, or None when it can; reason is `host`
    for a host that breaks service/auth/clients/redirect_hosts.py's rules, else `redirect_uri`."""
    if len(uri) > MAX_REDIRECT_URI_LENGTH:
        return "redirect_uri", f"a redirect URI is at most {MAX_REDIRECT_URI_LENGTH} characters"
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F or _invisible(ch) for ch in uri):
        return "redirect_uri", "a redirect URI may not contain spaces or control characters"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return "redirect_uri", f"{uri!r} is not a valid URI"
    scheme = parts.scheme
    if not scheme or not _SCHEME.fullmatch(scheme) or not uri.startswith(scheme + ":"):
        return "redirect_uri", (
            f"{uri!r} must be an absolute URI: https, http on a loopback host, or an app scheme"
        )
    if scheme in REFUSED_SCHEMES:
        return "redirect_uri", f"{uri!r} uses the {scheme}: scheme, which cannot be a redirect URI"
    if parts.fragment or "#" in uri:
        return "redirect_uri", f"{uri!r} must not contain a fragment"
    if "\\" in parts.netloc:
        return "host", f"the host of {uri!r} contains a backslash, which a host name cannot"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "redirect_uri", f"{uri!r} must not contain user information"
    if scheme in ("https", "http"):
        return _web_uri_refusal(uri, parts.netloc, scheme)
    if parts.netloc and not _APP_AUTHORITY.fullmatch(parts.netloc):
        return "host", f"the target of {uri!r} may hold only letters, digits, '.', '-', '_', '~'"
    if not (parts.netloc or parts.path):
        return "redirect_uri", f"{uri!r} must name a target after the scheme"
    return None


def _web_uri_refusal(uri: str, netloc: str, scheme: str) -> tuple[str, str] | None:
    if not netloc:
        return "redirect_uri", f"{uri!r} must name a host"
    try:
        host, _ = split_authority(netloc)
        ascii_host(host)
    except ValueError as err:
        return "host", f"{uri!r} is refused: {err}"
    if scheme == "http" and not is_loopback_host(host):
        return "redirect_uri", f"{uri!r} uses http on a host that is not loopback; use https"
    return None


def _invisible(ch: str) -> bool:
    return not ch.isascii() and unicodedata.category(ch)[0] in "CZ"


def _loopback_http(uri: str) -> bool:
    parts = urlsplit(uri)
    return parts.scheme == "http" and is_loopback_host(parts.hostname or "")


def _without_port(uri: str) -> tuple[str, str, str, str]:
    parts = urlsplit(uri)
    host = (parts.hostname or "").lower()
    return parts.scheme, host, parts.path, parts.query


def matches_registered(asked: str, registered: tuple[str, ...]) -> bool:
    """`asked` is one of the `registered` URIs, byte for byte, or a loopback http one of
    them with another port (RFC 8252 §7.3); either way it obeys today's rules (a URI
    registered before a rule was added cannot be used any more)."""
    if redirect_uri_problem(asked) is not None:
        return False
    if asked in registered:
        return True
    if not _loopback_http(asked):
        return False
    key = _without_port(asked)
    return any(_loopback_http(r) and _without_port(r) == key for r in registered)


def redirect_origin(uri: str) -> str | None:
    """The CSP source of a valid redirect URI (for the page's `form-action`), serialized
    from its parsed parts, never copied: scheme://ascii-host[:port] for http(s), the bare
    scheme (`cursor:`) for an app scheme; None for a URI that breaks the rules."""
    if redirect_uri_problem(uri) is not None:
        return None
    parts = urlsplit(uri)
    if parts.scheme in ("https", "http"):
        host, port = split_authority(parts.netloc)
        return f"{parts.scheme}://{ascii_host(host)}" + (f":{port}" if port else "")
    return f"{parts.scheme}:"


def redirect_host(uri: str) -> ShownHost:
    """What a person is told the browser returns to: the host (and port) of an http(s) URI,
    in punycode with a single-script Unicode form beside it (redirect_hosts.py); the scheme
    and target of an app's URI (`cursor://anysphere.cursor-mcp`)."""
    parts = urlsplit(uri)
    if parts.scheme in ("https", "http"):
        try:
            return shown_host(*split_authority(parts.netloc))
        except ValueError:
            return ShownHost(ascii(parts.netloc))  # never reached for a URI that matched
    if parts.netloc:
        return ShownHost(f"{parts.scheme}://{parts.netloc}")
    return ShownHost(f"{parts.scheme}:")


# What stays as it is when a URI is written in ASCII: RFC 3986's reserved and unreserved
# characters and `%` (already-encoded bytes are not encoded again).
_URI_SAFE = "!#$%&'()*+,/:;=?@[]~-._"


def ascii_uri(uri: str) -> str:
    """A valid redirect URI as ASCII, for a Location header: the host in punycode, other
    non-ASCII characters percent-encoded as UTF-8; an ASCII URI is returned unchanged."""
    if uri.isascii():
        return uri
    parts = urlsplit(uri)
    netloc = parts.netloc
    if parts.scheme in ("https", "http"):
        host, port = split_authority(netloc)
        netloc = ascii_host(host) + (f":{port}" if port else "")
    path, query = quote(parts.path, safe=_URI_SAFE), quote(parts.query, safe=_URI_SAFE)
    return urlunsplit((parts.scheme, netloc, path, query, ""))


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
