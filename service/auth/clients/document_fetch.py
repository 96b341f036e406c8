"""Fetching a Client ID Metadata Document without becoming an SSRF tool.

A metadata document's URL is chosen by whoever sends the browser to `/authorize`, so
`fetch_document` judges where it connects before it connects (the rules:
outbound_address.py) and returns the body and the response's caching headers;
`metadata_documents.py` validates and caches. `allow_private`
(ELOVA_OAUTH_CIMD_ALLOW_PRIVATE) lifts the address rule, not the form rule. The rules in
order, why, and the refusals that leave no port oracle: docs/decisions/oauth.md, "Where the
metadata-document fetch connects".
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver
from yarl import URL

from service.auth.clients.outbound_address import (
    Host,
    parse_authority,
    public_address,
    public_unicast,
)
from service.auth.clients.registry import is_loopback_host
from service.errors import FetchRefused, PrivateAddress

MAX_DOCUMENT_BYTES = 5 * 1024
MAX_URL_LENGTH = 1000
FETCH_TIMEOUT_SECONDS = 5.0
USER_AGENT = "elova-mcp (client-id-metadata-document fetch)"
NOT_PUBLIC = "the client id URL's host is or resolves to a private or local address"
BAD_HOST = (
    "the client id URL's host must be an ASCII host name (letters, digits, hyphens and dots;"
    " punycode for a Unicode name) or a canonical IP address"
)

# The host and addresses the fetch running in this context judged; the connector's
# resolver answers from here only.
_judged: ContextVar[tuple[str, tuple[ResolveResult, ...]] | None] = ContextVar(
    "judged_addresses", default=None
)


@dataclass(frozen=True, slots=True)
class Target:
    """A client id URL that passed the URL rules: what the HTTP stack will request."""

    url: URL
    host: Host
    port: int


def document_target(url: str, *, allow_private: bool) -> Target:
    """`url` as a metadata document's location, or FetchRefused saying why it cannot be."""
    parts = _split(url)
    host, port = _authority(parts.scheme, parts.netloc, allow_private)
    if parts.fragment or "#" in url:
        raise FetchRefused("the client id URL must not contain a fragment")
    segments = parts.path.split("/")
    if not parts.path.strip("/") or "." in segments or ".." in segments:
        raise FetchRefused("the client id URL must have a path without . or .. segments")
    target = Target(_parsed(url), host, port or (443 if parts.scheme == "https" else 80))
    if not _same_destination(target, parts.scheme):
        raise FetchRefused(BAD_HOST)
    if host.address is not None and not allow_private and not public_unicast(host.address):
        raise FetchRefused(NOT_PUBLIC)
    return target


def _split(url: str) -> SplitResult:
    if len(url) > MAX_URL_LENGTH:
        raise FetchRefused(f"the client id URL is longer than {MAX_URL_LENGTH} characters")
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url):
        raise FetchRefused("the client id URL contains spaces or control characters")
    try:
        return urlsplit(url)
    except ValueError:
        raise FetchRefused("the client id is not a valid URL") from None


def _authority(scheme: str, netloc: str, allow_private: bool) -> tuple[Host, int | None]:
    if scheme not in ("https", "http"):
        raise FetchRefused("the client id URL must use https")
    if not netloc:
        raise FetchRefused("the client id URL names no host")
    if "@" in netloc:
        raise FetchRefused("the client id URL must not contain user information")
    authority = parse_authority(netloc)
    if authority is None:
        raise FetchRefused(BAD_HOST)
    if scheme == "http" and not (allow_private and is_loopback_host(authority[0].name)):
        raise FetchRefused("the client id URL must use https")
    return authority


def _parsed(url: str) -> URL:
    try:
        return URL(url)
    except ValueError:
        raise FetchRefused("the client id is not a valid URL") from None


def _same_destination(target: Target, scheme: str) -> bool:
    """Whether the HTTP stack reads the URL as going where the rules judged it goes."""
    url = target.url
    if url.scheme != scheme or url.port != target.port or url.raw_host is None:
        return False
    if target.host.address is None:
        return url.raw_host == target.host.name
    return url.raw_host == target.host.address.compressed


class JudgedAddressResolver(AbstractResolver):
    """The fetch session's resolver: the addresses the running fetch judged, for the host
    it judged; any other question is refused (fail closed), nothing is looked up again."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        judged = _judged.get()
        if judged is None or judged[0] != host or not judged[1]:
            raise PrivateAddress(NOT_PUBLIC)
        return [{**found, "port": port} for found in judged[1]]

    async def close(self) -> None:
        return None


async def judged_addresses(target: Target, *, allow_private: bool) -> tuple[ResolveResult, ...]:
    """Every address of the target's host name, each judged (none for an IP literal: it
    is judged as written and the connector does not resolve it)."""
    if target.host.address is not None:
        return ()
    try:
        found = await ThreadedResolver().resolve(target.host.name, target.port, socket.AF_UNSPEC)
    except OSError:
        raise FetchRefused(f"{target.host.name} could not be reached", transient=True) from None
    if not found:
        raise FetchRefused(f"{target.host.name} could not be reached", transient=True)
    if not allow_private and not all(public_address(r["host"]) for r in found):
        raise FetchRefused(NOT_PUBLIC)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Fetched:
    body: bytes
    headers: Mapping[str, str]


def new_session(*, allow_private: bool, tls: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """The session every metadata fetch of this process uses (closed at shutdown). `tls`:
    the context certificates are verified with (default: the system's trust store)."""
    connector = aiohttp.TCPConnector(
        resolver=JudgedAddressResolver(),
        ssl=tls if tls is not None else True,
        limit=8,
        ttl_dns_cache=None,
        use_dns_cache=False,
        force_close=True,
    )
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS),
        headers={
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        },
        auto_decompress=False,
    )


def _peer_is_allowed(resp: aiohttp.ClientResponse, allow_private: bool) -> bool:
    if allow_private:
        return True
    connection = resp.connection
    transport = connection.transport if connection is not None else None
    peer = transport.get_extra_info("peername") if transport is not None else None
    return peer is not None and len(peer) > 0 and public_address(str(peer[0]))


async def fetch_document(
    session: aiohttp.ClientSession, url: str, *, allow_private: bool
) -> Fetched:
    """GET the document at `url`, or raise FetchRefused. In order:

    - the URL: `https` only, a host, a path, no user information, no fragment; the host in
      an accepted form (plain ASCII LDH or a canonical IP literal), refused before any DNS
      lookup or socket otherwise; the URL as the HTTP stack parses it (yarl) must name the
      same scheme, host and port;
    - the addresses: an IP literal is judged as written; a name is resolved here
      (getaddrinfo in a thread) and refused unless EVERY address is public unicast;
    - the connection: the connector's resolver (`JudgedAddressResolver`) answers only with
      the addresses this fetch judged, for the host it judged; TLS is verified against the
      URL's host name; the peer address is checked once more before the body is read;
    - the answer: one GET, no redirects, no proxy from the environment, no cookies, 5
      seconds in total (resolution included), at most `MAX_DOCUMENT_BYTES` (checked on
      `Content-Length` and while reading), status 200 only.

    Every refusal of a non-public destination is `NOT_PUBLIC` and opens no socket; every
    connection failure of a host that passed reads "could not be reached". `allow_private`
    also admits `http` on a loopback host."""
    target = document_target(url, allow_private=allow_private)
    host = target.host.name
    try:
        async with asyncio.timeout(FETCH_TIMEOUT_SECONDS):
            judged = await judged_addresses(target, allow_private=allow_private)
            token = _judged.set((host, judged))
            try:
                return await _get(session, target, allow_private)
            finally:
                _judged.reset(token)
    except TimeoutError:
        raise FetchRefused(
            f"{host} did not answer within {FETCH_TIMEOUT_SECONDS:g} s", transient=True
        ) from None
    except aiohttp.ClientConnectorError as err:
        if isinstance(err.os_error, PrivateAddress):
            raise FetchRefused(NOT_PUBLIC) from None
        raise FetchRefused(f"{host} could not be reached", transient=True) from None
    except (aiohttp.ClientError, OSError):
        raise FetchRefused(f"{host} could not be reached", transient=True) from None


async def _get(session: aiohttp.ClientSession, target: Target, allow_private: bool) -> Fetched:
    async with session.get(target.url, allow_redirects=False) as resp:
        if not _peer_is_allowed(resp, allow_private):
            raise FetchRefused(NOT_PUBLIC)
        if 300 <= resp.status < 400:
            raise FetchRefused("the metadata document redirects; serve it at its client id")
        if resp.status != 200:
            raise FetchRefused(
                f"the metadata document answered HTTP {resp.status}",
                transient=resp.status >= 500,
            )
        return Fetched(await _bounded_body(resp), dict(resp.headers))


async def _bounded_body(resp: aiohttp.ClientResponse) -> bytes:
    too_large = FetchRefused(f"the metadata document is larger than {MAX_DOCUMENT_BYTES} bytes")
    if (resp.content_length or 0) > MAX_DOCUMENT_BYTES:
        raise too_large
    body = b""
    while len(body) <= MAX_DOCUMENT_BYTES:
        more = await resp.content.read(MAX_DOCUMENT_BYTES + 1 - len(body))
        if not more:
            return body
        body += more
    raise too_large
