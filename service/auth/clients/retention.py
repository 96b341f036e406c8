"""Retention of unused clients: a client that never completed an authorization goes.

A registered (`dynamic`) or metadata-document (`metadata`) client whose
`oauth_clients.authorized_at` is still NULL is deleted once
ELOVA_OAUTH_UNUSED_CLIENT_RETENTION_HOURS have passed since it was registered, or for a
document client since its document was last fetched; operator clients are never swept.
Each replica sweeps every ELOVA_OAUTH_CLIENT_SWEEP_SECONDS in batches of `BATCH`;
`mark_authorized` is the approval's side. Why several replicas may sweep at once and how a
sweep racing an approval ends: docs/decisions/oauth.md, "Registration bounds".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator

import asyncpg
from aiohttp import web

from service.app_keys import CONFIG, DB_POOL, METRICS

log = logging.getLogger(__name__)

BATCH = 500
MAX_BATCHES = 100  # at most 50 000 rows a sweep; the next sweep goes on

# Candidates are locked FOR UPDATE SKIP LOCKED, so replicas sweeping at once take different
# rows; NOT EXISTS approvals is for approvals granted by a replica of the previous release,
# which does not set authorized_at.
_SWEEP = """
WITH unused AS (
    SELECT client_id FROM oauth_clients c
     WHERE c.authorized_at IS NULL AND c.kind IN ('dynamic', 'metadata')
       AND coalesce(c.document_fetched_at, c.created_at) < now() - make_interval(hours => $1)
       AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.client_id = c.client_id)
     ORDER BY coalesce(c.document_fetched_at, c.created_at)
     LIMIT $2
       FOR UPDATE SKIP LOCKED
)
DELETE FROM oauth_clients c USING unused u
 WHERE c.client_id = u.client_id
RETURNING c.kind
"""
_MARK = """
UPDATE oauth_clients SET authorized_at = coalesce(authorized_at, now())
 WHERE client_id = $1
RETURNING true
"""


async def mark_authorized(conn: asyncpg.Connection, client_id: str) -> bool:
    """In an approval's transaction, before the approval is written: the client has
    completed an authorization (never swept from now on). False when the client is gone."""
    return bool(await conn.fetchval(_MARK, client_id))


async def sweep_unused_clients(pool: asyncpg.Pool, retention_hours: int) -> Counter[str]:
    """Delete the clients past the retention that never completed an authorization; the
    number deleted by kind."""
    removed: Counter[str] = Counter()
    for _ in range(MAX_BATCHES):
        rows = await pool.fetch(_SWEEP, retention_hours, BATCH)
        removed.update(r["kind"] for r in rows)
        if len(rows) < BATCH:
            break
    return removed


async def _sweep_forever(app: web.Application) -> None:
    settings = app[CONFIG].registration
    while True:
        await asyncio.sleep(settings.sweep_seconds)
        try:
            removed = await sweep_unused_clients(app[DB_POOL], settings.unused_retention_hours)
        except Exception as err:  # the next sweep tries again; the task must not end
            log.warning("unused clients not swept: %r", err)
            continue
        for kind, count in removed.items():
            app[METRICS].unused_clients_removed(kind, count)
        if removed:
            log.info("unused clients deleted: %s", dict(removed))


async def client_retention_ctx(app: web.Application) -> AsyncIterator[None]:
    """The sweep task, for as long as the app runs (registered after the pool's context)."""
    task = asyncio.create_task(_sweep_forever(app), name="unused-client-sweep")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
