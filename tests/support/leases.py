"""What the shared limiter holds in Redis: the unexpired concurrency leases of every account
under a key prefix, in either key layout (service/limits/script_calls.py)."""

from __future__ import annotations

import time

import redis.asyncio as aioredis


async def held_leases(redis: aioredis.Redis, prefix: str) -> int:
    """Leases not yet expired, summed over every account's lease set under `prefix`."""
    now_ms = int(time.time() * 1000)
    held = 0
    for pattern in (f"{prefix}limits:*:account", f"{prefix}{{limits}}:account:*"):
        async for key in redis.scan_iter(match=pattern, count=1000):  # both key layouts
            held += int(await redis.zcount(key, now_ms, "+inf"))
    return held
