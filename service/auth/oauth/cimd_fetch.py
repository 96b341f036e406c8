"""Fetching a Client ID Metadata Document without becoming an SSRF tool.

A metadata document's URL is chosen by whoever sends the browser to `/authorize`, so the
fetch is guarded at every step:

- the URL: `https` only, with a host and a path, no user information, no fragment; a host
  written as an IP address must be public;
- DNS: the resolver answers only when EVERY address the name resolves to is public
  (not private, loopback, link-local, multicast, reserved, unspecified or shared space);
- the socket: the address actually connected to is checked again before the body is read
  (a literal address skips the resolver, and this also covers any resolver behaviour);
- the answer: one GET, no redirects, no proxy from the environment, no cookies, a 5-second
  total timeout, at most `MAX_DOCUMENT_BYTES` (checked on `Content-Length` and while
  reading), status 200 only.

`allow_private` (ELOVA_OAUTH_CIMD_ALLOW_PRIVATE, for tests and private deployments) lifts
the address rule and admits `http` on a loopback host. The fetch returns the body and the
response's caching headers; `cimd.py` validates and caches.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from service.auth.oauth.clients import is_loopback_host
from service.errors import FetchRefused, PrivateAddress

MAX_DOCUMENT_BYTES = 5 * 1024
MAX_URL_LENGTH = 1000
FETCH_TIMEOUT_SECONDS = 5.0
USER_AGENT = "elova-mcp (client-id-metadata-document fetch)"


def public_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _literal_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def document_url_problem(url: str, *, allow_private: bool) -> str | None:
    """Why `url` cannot be a metadata document's client id, or None when it can."""
    if len(url) > MAX_URL_LENGTH:
        return f"the client id URL is longer than {MAX_URL_LENGTH} characters"
    if any(ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url):
        return "the client id URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError:
        return "the client id is not a valid URL"
    loopback_http = allow_private and parts.scheme == "http" and is_loopback_host(host)
    if parts.scheme != "https" and not loopback_http:
        return "the client id URL must use https"
    if not host:
        return "the client id URL names no host"
    if parts.username is not None or parts.password is not None:
        return "the client id URL must not contain user information"
    if parts.fragment or "#" in url:
        return "the client id URL must not contain a fragment"
    segments = parts.path.split("/")
    if not parts.path.strip("/") or "." in segments or ".." in segments:
        return "the client id URL must have a path without . or .. segments"
    if not allow_private and _literal_address(host) and not public_address(host):
        return "the client id URL points to a private or local address"
    return None


class PublicOnlyResolver(AbstractResolver):
    """DNS through the default resolver, refusing a name with any non-public address."""

    def __init__(self) -> None:
        self._inner = ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        found = await self._inner.resolve(host, port, family)
        private = [r["host"] for r in found if not public_address(r["host"])]
        if private or not found:
            raise PrivateAddress(f"{host} resolves to a private or local address")
        return found

    async def close(self) -> None:
        await self._inner.close()


@dataclass(frozen=True, slots=True)
class Fetched:
    body: bytes
    headers: Mapping[str, str]


def new_session(*, allow_private: bool) -> aiohttp.ClientSession:
    """The session every metadata fetch of this process uses (closed at shutdown)."""
    connector = aiohttp.TCPConnector(
        resolver=None if allow_private else PublicOnlyResolver(),
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
    """GET the document at `url` under every rule above, or raise FetchRefused."""
    problem = document_url_problem(url, allow_private=allow_private)
    if problem is not None:
        raise FetchRefused(problem)
    host = urlsplit(url).hostname
    try:
        async with session.get(url, allow_redirects=False) as resp:
            if not _peer_is_allowed(resp, allow_private):
                raise FetchRefused(f"{host} is a private or local address")
            if 300 <= resp.status < 400:
                raise FetchRefused("the metadata document redirects; serve it at its client id")
            if resp.status != 200:
                raise FetchRefused(
                    f"the metadata document answered HTTP {resp.status}",
                    transient=resp.status >= 500,
                )
            return Fetched(await _bounded_body(resp), dict(resp.headers))
    except TimeoutError:
        raise FetchRefused(
            f"{host} did not answer within {FETCH_TIMEOUT_SECONDS:g} s", transient=True
        ) from None
    except aiohttp.ClientConnectorError as err:
        if isinstance(err.os_error, PrivateAddress):
            raise FetchRefused(f"{host} resolves to a private or local address") from None
        raise FetchRefused(f"{host} could not be reached", transient=True) from None
    except aiohttp.ClientError:
        raise FetchRefused(f"{host} could not be reached", transient=True) from None


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
