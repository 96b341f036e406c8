"""The Redis connection: one client per app, in `app[REDIS]` (None without ELOVA_REDIS_URL).

redis-py's defaults suit a cache, not an admission on every request: its retry policy turns
a refused connection into seconds of stall, and its timeouts are unbounded. Here a call to
Redis either answers within ELOVA_REDIS_TIMEOUT_MS (default 250 ms) or fails at once, and
the circuit breaker in the admission decides what happens next. Nothing connects at start:
the service starts and stays ready while Redis is down.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import redis.asyncio as aioredis
from aiohttp import web
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from service.keys import CONFIG, REDIS

# Connect and read timeouts (the default of ELOVA_REDIS_TIMEOUT_MS). An admission script runs
# in well under a millisecond, and a refused connection fails at once whatever this is; the
# timeout bounds a Redis that hangs. 100 ms proved too tight on a loaded 2-core machine: a
# busy event loop alone made replies "late" and turned them into spurious 429s.
REDIS_TIMEOUT_SECONDS = 0.25


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
    client = make_client(url, timeout=app[CONFIG].limits.redis_timeout_seconds)
    app[REDIS] = client
    try:
        yield
    finally:
        await client.aclose()
