"""The Redis connection: one client per app, in `app[REDIS]` (None without ELOVA_REDIS_URL).

redis-py's defaults suit a cache, not an admission on every request: its retry policy turns
a refused connection into seconds of stall, and its timeouts are unbounded. Here a call to
Redis either answers within `REDIS_TIMEOUT_SECONDS` or fails at once, and the circuit
breaker in the admission decides what happens next. Nothing connects at start: the service
starts and stays ready while Redis is down.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from service.keys import CONFIG, REDIS

# Connect and read timeouts. An admission script runs in well under a millisecond; a reply
# slower than this means Redis is overloaded or unreachable, and waiting longer only moves
# the stall into every request.
REDIS_TIMEOUT_SECONDS = 0.1


def make_client(url: str, *, timeout: float = REDIS_TIMEOUT_SECONDS) -> aioredis.Redis:
    """A client that never retries and never waits longer than `timeout` for one step."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        health_check_interval=0,
        decode_responses=False,
    )
    return client


async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the client lives as long as the app; closed after the admission."""
    url = app[CONFIG].redis_url
    if url is None:
        app[REDIS] = None
        yield
        return
    client = make_client(url)
    app[REDIS] = client
    try:
        yield
    finally:
        await client.aclose()
