"""Client ID Metadata Documents: an https URL as `client_id`, its document as the client.

A client id that is a URL is resolved here: the document is fetched (document_fetch.py,
SSRF-guarded), validated (`validate_document`, registration's rules and bounds:
metadata_fields.py), stored in `oauth_clients` (kind `metadata`, client id = the URL; each
fetch stamps `document_fetched_at`, which retention.py sweeps by) and returned as a
`Client`. `MetadataClients` is the per-process cache; which endpoint asks for which client:
lookup.py. The validation and cache rules and why: docs/decisions/oauth.md, "Client ID
Metadata Documents".
"""

from __future__ import annotations

import asyncio
import re
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import msgspec
from aiohttp import hdrs

from service.audit.oauth_events import client_registered
from service.audit.writer import AuditWriter
from service.auth.clients.document_fetch import fetch_document, new_session
from service.auth.clients.metadata_fields import (
    INFORMATION,
    MAX_INFO_URL_LENGTH,
    MAX_REDIRECT_URIS,
    ClientName,
    Entries,
    RedirectURIs,
    Scope,
    field_of,
    information_problem,
    size_refusal,
)
from service.auth.clients.names import clean_client_name, registered_scope
from service.auth.clients.registry import (
    CLIENT_COLUMNS,
    Client,
    client_of,
    redirect_uri_problem,
)
from service.errors import FetchRefused

GRANT_TYPES = ("authorization_code", "refresh_token", "urn:ietf:params:oauth:grant-type:jwt-bearer")
MAX_CACHED = 1000
REFUSAL_SECONDS = 30.0
MAX_CONCURRENT_FETCHES = 4
_MAX_AGE = re.compile(r"(?:^|[,\s])max-age\s*=\s*\"?(\d+)", re.IGNORECASE)


def is_metadata_client_id(client_id: str) -> bool:
    """A client id that names a metadata document (a URL) rather than a registration."""
    return client_id.startswith(("https://", "http://"))


class _Document(msgspec.Struct):
    """The fields we read, with registration's bounds (metadata_fields.py); the
    informational ones are kept only when they are strings within their bound."""

    client_id: str
    redirect_uris: RedirectURIs
    client_name: ClientName | None = None
    token_endpoint_auth_method: str = "none"
    grant_types: Entries = msgspec.field(default_factory=lambda: ["authorization_code"])
    response_types: Entries = msgspec.field(default_factory=lambda: ["code"])
    scope: Scope | None = None
    client_uri: Any = None
    logo_uri: Any = None
    tos_uri: Any = None
    policy_uri: Any = None
    software_id: Any = None
    software_version: Any = None
    client_secret: Any = None


_decoder = msgspec.json.Decoder(_Document)
_INFORMATION_BOUND = {"software_id": 200, "software_version": 100}


@dataclass(frozen=True, slots=True)
class Accepted:
    name: str
    redirect_uris: list[str]
    scope: str | None
    metadata: dict[str, str]


def validate_document(url: str, body: bytes) -> Accepted:
    """The document's client, or FetchRefused naming what is wrong with it."""
    try:
        doc = _decoder.decode(body)
    except msgspec.ValidationError as err:
        if size_refusal(str(err)):
            named = field_of(str(err)) or "a field"
            raise FetchRefused(
                f"the metadata document's {named} is over its bound: {err}"
            ) from None
        raise FetchRefused(f"the metadata document is malformed: {err}") from None
    except (msgspec.DecodeError, RecursionError):
        raise FetchRefused("the metadata document is not a JSON object") from None
    if doc.client_id != url:
        raise FetchRefused("the metadata document's client_id is not the URL it was fetched from")
    if doc.client_secret is not None:
        raise FetchRefused("a metadata document must not contain a client_secret")
    if doc.token_endpoint_auth_method != "none":
        raise FetchRefused("a metadata document client must use token_endpoint_auth_method none")
    _check_redirect_uris(doc.redirect_uris)
    if "authorization_code" not in doc.grant_types or set(doc.grant_types) - set(GRANT_TYPES):
        raise FetchRefused(
            "grant_types must include authorization_code and may add refresh_token"
            " and the jwt-bearer grant"
        )
    if doc.response_types != ["code"]:
        raise FetchRefused('response_types must be ["code"]')
    try:
        scope = registered_scope(doc.scope)
    except ValueError as err:
        raise FetchRefused(f"the metadata document's {err}") from None
    name = clean_client_name(doc.client_name) or (urlsplit(url).hostname or url)
    kept = _information(doc)
    return Accepted(name, list(dict.fromkeys(doc.redirect_uris)), scope, kept)


def _check_redirect_uris(uris: list[str]) -> None:
    if not uris or len(uris) > MAX_REDIRECT_URIS:
        raise FetchRefused(f"the document must list 1 to {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem is not None:
            raise FetchRefused(f"the metadata document's redirect URI is refused: {problem}")


def _information(doc: _Document) -> dict[str, str]:
    """The informational fields as registration keeps them; one over its bound or holding
    an invisible character refuses the document, like a registration."""
    kept = {k: getattr(doc, k) for k in INFORMATION if isinstance(getattr(doc, k), str)}
    for name, value in kept.items():
        bound = _INFORMATION_BOUND.get(name, MAX_INFO_URL_LENGTH)
        if len(value) > bound:
            raise FetchRefused(f"the metadata document's {name} is over its bound of {bound}")
    problem = information_problem(kept)
    if problem is not None:
        raise FetchRefused(f"the metadata document's {problem}")
    return kept


def cache_seconds(headers: Mapping[str, str], ceiling: float) -> float:
    """How long a fetched document may be reused: its max-age, within the ceiling."""
    control = headers.get(hdrs.CACHE_CONTROL, "")
    lowered = control.lower()
    if "no-store" in lowered or "no-cache" in lowered:
        return 0.0
    found = _MAX_AGE.search(control)
    if found is None:
        return ceiling
    return min(float(found.group(1)), ceiling)


_UPSERT = f"""
    INSERT INTO oauth_clients (client_id, client_name, redirect_uris, kind,
        token_endpoint_auth_method, grant_types, response_types, scope, metadata,
        document_fetched_at)
    VALUES ($1, $2, $3, 'metadata', 'none', $4, '{{code}}', $5, $6::jsonb, now())
    ON CONFLICT (client_id) DO UPDATE SET client_name = EXCLUDED.client_name,
        redirect_uris = EXCLUDED.redirect_uris, scope = EXCLUDED.scope,
        metadata = EXCLUDED.metadata, document_fetched_at = now()
     WHERE oauth_clients.kind = 'metadata'
    RETURNING {CLIENT_COLUMNS}, (xmax = 0) AS first_stored
"""


class MetadataClients:
    """The per-process cache of accepted (and refused) documents, and the fetch session.

    An accepted document is reused for its `max-age` within the ceiling (`no-store`,
    `no-cache`: not reused), a refused fetch for `REFUSAL_SECONDS`; at most `MAX_CACHED`
    documents. Every fetch rewrites the stored row, so replicas agree with the last fetch."""

    def __init__(
        self, *, allow_private: bool, ceiling_seconds: float, audit: AuditWriter | None = None
    ) -> None:
        self.audit = audit  # the audit trail: a client first stored is a client registered
        self.allow_private = allow_private
        self.ceiling = ceiling_seconds
        self._session = new_session(allow_private=allow_private)
        self._cache: OrderedDict[str, tuple[float, Client | FetchRefused]] = OrderedDict()
        # At most this many fetches at once per process, whatever asks for them.
        self._fetching = asyncio.Semaphore(MAX_CONCURRENT_FETCHES)

    async def close(self) -> None:
        await self._session.close()

    def _remember(self, url: str, until: float, value: Client | FetchRefused) -> None:
        self._cache[url] = (until, value)
        self._cache.move_to_end(url)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)

    def forget(self, url: str) -> None:
        """Drop what is cached for `url` (its row was deleted): the next use fetches."""
        self._cache.pop(url, None)

    def _cached(self, url: str) -> Client | FetchRefused | None:
        hit = self._cache.get(url)
        if hit is None or hit[0] <= time.monotonic():
            return None
        return hit[1]

    async def client(self, conn: asyncpg.Connection | asyncpg.Pool, url: str) -> Client:
        """The client of the document at `url` (fetched unless cached), or FetchRefused."""
        hit = self._cached(url)
        if hit is None:
            async with self._fetching:
                hit = await self._fetch(conn, url)
        if isinstance(hit, FetchRefused):
            # A fresh exception: re-raising the remembered one would grow its traceback.
            raise FetchRefused(str(hit), transient=hit.transient)
        return hit

    async def _fetch(
        self, conn: asyncpg.Connection | asyncpg.Pool, url: str
    ) -> Client | FetchRefused:
        try:
            fetched = await fetch_document(self._session, url, allow_private=self.allow_private)
            accepted = validate_document(url, fetched.body)
        except FetchRefused as err:
            self._remember(url, time.monotonic() + REFUSAL_SECONDS, err)
            return err
        row = await conn.fetchrow(
            _UPSERT,
            url,
            accepted.name,
            accepted.redirect_uris,
            list(GRANT_TYPES),
            accepted.scope,
            msgspec.json.encode(accepted.metadata).decode(),
        )
        if row is None:  # the id belongs to a client of another kind
            return FetchRefused("this client id is already taken by another client")
        if row["first_stored"] and self.audit is not None:
            await client_registered(self.audit, None, url, "metadata")
        client = client_of(row)
        ttl = cache_seconds(fetched.headers, self.ceiling)
        if ttl > 0:
            self._remember(url, time.monotonic() + ttl, client)
        return client
