"""The key sets of trusted IdPs, fetched with the metadata-document fetch's protections.

A key set is fetched like a Client ID Metadata Document (clients/document_fetch.py: the
same address rules, 5 s, 5 KiB, no redirects; `http` only on loopback and only with
ELOVA_OAUTH_CIMD_ALLOW_PRIVATE), kept in memory per issuer, and fetched again when a token
names a `kid` it lacks, at most once a minute per issuer. Each fetch replaces the set, so
a key the IdP dropped is refused after the next fetch.
"""

from __future__ import annotations

import asyncio
import time

import jwt
import msgspec

from service.auth.clients.document_fetch import fetch_document, new_session
from service.errors import FetchRefused

REFETCH_SECONDS = 60.0
MAX_KEYS = 20
ALGORITHMS = ("RS256", "ES256", "EdDSA")


class JwksUnavailable(Exception):
    """The IdP's key set could not be fetched or read; the message says why."""


class _Set:
    __slots__ = ("fetched_at", "keys")

    def __init__(self) -> None:
        self.keys: dict[str, jwt.PyJWK] = {}
        self.fetched_at = float("-inf")


def parse_jwks(body: bytes) -> dict[str, jwt.PyJWK]:
    """The signing keys of a JWKS document by `kid` (keys without one, or of another use or
    algorithm family, are left out), or JwksUnavailable."""
    try:
        doc = msgspec.json.decode(body)
    except msgspec.DecodeError:
        raise JwksUnavailable("the IdP's JWKS is not JSON") from None
    entries = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise JwksUnavailable("the IdP's JWKS has no keys array")
    keys: dict[str, jwt.PyJWK] = {}
    for entry in entries[:MAX_KEYS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("kid"), str):
            continue
        if entry.get("use", "sig") != "sig" or entry.get("kty") not in ("RSA", "EC", "OKP"):
            continue
        try:
            keys[entry["kid"]] = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
            continue
    return keys


class JwksCache:
    """One replica's key sets of the trusted IdPs."""

    def __init__(self, *, allow_private: bool) -> None:
        self.allow_private = allow_private
        self._sets: dict[str, _Set] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._session = new_session(allow_private=allow_private)

    async def close(self) -> None:
        await self._session.close()

    async def key(self, issuer: str, jwks_uri: str, kid: str) -> jwt.PyJWK | None:
        """The issuer's key `kid`, fetching the set when it is not known and the last fetch
        is a minute old; None when the set has no such key."""
        held = self._sets.setdefault(f"{issuer} {jwks_uri}", _Set())
        if kid in held.keys:
            return held.keys[kid]
        lock = self._locks.setdefault(f"{issuer} {jwks_uri}", asyncio.Lock())
        async with lock:
            if kid not in held.keys and time.monotonic() - held.fetched_at >= REFETCH_SECONDS:
                held.fetched_at = time.monotonic()
                try:
                    fetched = await fetch_document(
                        self._session, jwks_uri, allow_private=self.allow_private
                    )
                except FetchRefused as err:
                    raise JwksUnavailable(f"the IdP's JWKS could not be fetched: {err}") from None
                held.keys = parse_jwks(fetched.body)
        return held.keys.get(kid)
