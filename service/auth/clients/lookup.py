"""Which client a `client_id` names, for this app: a registered client, or the client of a
Client ID Metadata Document (service/auth/clients/metadata_documents.py) through the app's
cache in `app[METADATA_CLIENTS]` — at `/authorize` (`authorizing_client`) and at `/token`
and `/revoke` (`token_client`). Why `/token` falls back to a stored row only when the
document's host does not answer: docs/decisions/oauth.md, "Client ID Metadata Documents".
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
from aiohttp import web

from service.app_keys import AUDIT, CONFIG, METADATA_CLIENTS
from service.auth.clients.metadata_documents import MetadataClients, is_metadata_client_id
from service.auth.clients.registry import Client, load_client
from service.errors import FetchRefused


async def metadata_clients_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG]
    app[METADATA_CLIENTS] = MetadataClients(
        allow_private=cfg.oauth_cimd_allow_private,
        ceiling_seconds=float(cfg.oauth_cimd_cache_max_seconds),
        audit=app.get(AUDIT),
    )
    yield
    await app[METADATA_CLIENTS].close()


async def token_client(
    app: web.Application, conn: asyncpg.Connection | asyncpg.Pool, client_id: str
) -> Client | None:
    """The metadata-document client calling `/token` or `/revoke`, or None when it is
    unknown here; FetchRefused when its document is now refused.

    The URL client is resolved through the cache, as at `/authorize`, so a document that
    became unacceptable stops its client here too (`invalid_client`). Only when the
    document's host does not answer (timeout, unreachable, 5xx) is the stored row of a
    document accepted before used. A URL that never passed `/authorize` has no row and is an
    unknown client."""
    stored = await load_client(conn, client_id)
    if stored is None:
        return None
    try:
        return await app[METADATA_CLIENTS].client(conn, client_id)
    except FetchRefused as err:
        if err.transient:
            return stored
        raise


async def authorizing_client(
    app: web.Application, conn: asyncpg.Connection | asyncpg.Pool, client_id: str
) -> Client | None:
    """The client an authorization request names (GET and the approval POST): a registered
    one, or the client of a metadata document, fetched unless cached (raising FetchRefused
    when its document is not acceptable)."""
    if is_metadata_client_id(client_id):
        return await app[METADATA_CLIENTS].client(conn, client_id)
    return await load_client(conn, client_id) if len(client_id) <= 200 else None
