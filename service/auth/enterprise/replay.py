"""An ID-JAG's `jti` is used once until the assertion expires, across replicas.

With Redis (ELOVA_REDIS_URL) the mark is `SET NX` with the assertion's remaining lifetime
plus the skew allowed, under the deployment's key prefix: the first replica to set it wins.
When Redis does not answer the grant is refused (503 `temporarily_unavailable`): an
assertion is never accepted twice for want of a check. Without Redis settings (one
replica) the marks are kept in this process.
"""

from __future__ import annotations

import hashlib
import time

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from service.errors import OAuthError

_local: dict[bytes, float] = {}


def _key(issuer: str, jti: str) -> bytes:
    return hashlib.sha256(f"{issuer}\n{jti}".encode()).digest()


async def first_use(
    redis: Redis | RedisCluster | None, prefix: str, issuer: str, jti: str, ttl: float
) -> bool:
    """True the first time (issuer, jti) is presented within `ttl` seconds."""
    digest = _key(issuer, jti)
    seconds = max(1, int(ttl) + 1)
    if redis is None:
        now = time.monotonic()
        for old in [k for k, until in _local.items() if until <= now]:
            del _local[old]
        if digest in _local:
            return False
        _local[digest] = now + seconds
        return True
    try:
        done = await redis.set(f"{prefix}idjag:{digest.hex()}", b"1", nx=True, ex=seconds)
    except (RedisError, OSError, TimeoutError):
        raise OAuthError(
            "temporarily_unavailable", "the assertion cannot be checked for replay now; retry",
            status=503,
        ) from None  # fmt: skip
    return bool(done)
