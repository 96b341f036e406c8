"""The Redis clients of the admission, one a mode: `redis_ctx` (service/limits/setup.py)
gives an app one, in `app[REDIS]` (None without Redis settings).

ELOVA_REDIS_MODE picks the client: `standalone` (`make_client`), `cluster`
(`make_cluster_client`) or `sentinel` (`SentinelClient`). In every mode a call either
answers within ELOVA_REDIS_TIMEOUT_MS or fails at once, and the admission's circuit breaker
decides what happens next; nothing connects at start, so the service starts and stays
ready while Redis is down. docs/decisions/limits.md, "Redis engines (issue 12)", Clients
and Sentinel URL, says why each is set up so.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

# Connect and read timeouts (the default of ELOVA_REDIS_TIMEOUT_MS). An admission script runs
# in well under a millisecond, and a refused connection fails at once whatever this is; the
# timeout bounds a Redis that hangs. 100 ms proved too tight on a loaded 2-core machine: a
# busy event loop alone made replies "late" and turned them into spurious 429s.
REDIS_TIMEOUT_SECONDS = 0.25

RedisClient = aioredis.Redis | RedisCluster

# The query options of a URL that configure TLS (redis-py's names): the sentinels get them.
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs",
                "ssl_check_hostname", "ssl_ca_data", "ssl_password", "ssl_min_version")  # fmt: skip


# redis-py's defaults suit a cache, not an admission on every request: its retry policy turns
# a refused connection into seconds of stall, and its timeouts are unbounded.
def _bounded(timeout: float) -> dict[str, Any]:
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "health_check_interval": 0,
    }


def make_client(url: str, *, timeout: float = REDIS_TIMEOUT_SECONDS) -> aioredis.Redis:
    """A standalone client on ELOVA_REDIS_URL that never retries and never waits longer
    than `timeout` for one step."""
    client: aioredis.Redis = aioredis.Redis.from_url(
        url, retry_on_error=[], decode_responses=False, **_bounded(timeout)
    )
    return client


def make_cluster_client(url: str, *, timeout: float = REDIS_TIMEOUT_SECONDS) -> RedisCluster:
    """A cluster client seeded with the one node `url` names (any node of the cluster);
    the rest is discovered."""
    return RedisCluster.from_url(url, decode_responses=False, **_bounded(timeout))


class SentinelClient:
    """The sentinels and the master they name: `master` is the client the admission uses.

    Its connections ask ELOVA_REDIS_SENTINELS for the current master of
    ELOVA_REDIS_SENTINEL_MASTER each time they connect. Only the URL's credentials, database
    number, scheme (`rediss` = TLS) and query options (such as `ssl_ca_certs`) are used; the
    sentinels are reached with the same TLS settings and with ELOVA_REDIS_SENTINEL_PASSWORD
    when they have a password of their own."""

    def __init__(
        self,
        sentinels: tuple[tuple[str, int], ...],
        master_name: str,
        url: str | None,
        *,
        timeout: float = REDIS_TIMEOUT_SECONDS,
        sentinel_password: str | None = None,
    ) -> None:
        options: dict[str, Any] = dict(parse_url(url)) if url else {}
        for taken_from_sentinels in ("host", "port", "path"):
            options.pop(taken_from_sentinels, None)
        tls = options.pop("connection_class", None) is SSLConnection
        sentinel_options = {k: options[k] for k in _TLS_OPTIONS if k in options}
        self.sentinel = Sentinel(  # type: ignore[no-untyped-call]
            list(sentinels),
            sentinel_kwargs={
                **_bounded(timeout),
                "ssl": tls,
                "password": sentinel_password,
                **sentinel_options,
            },
            **_bounded(timeout),
        )
        self.master: aioredis.Redis = self.sentinel.master_for(
            master_name, ssl=tls, retry_on_error=[], decode_responses=False, **options
        )

    async def aclose(self) -> None:
        await self.master.aclose()
        for sentinel in self.sentinel.sentinels:
            await sentinel.aclose()
