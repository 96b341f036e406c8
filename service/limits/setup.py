"""The limits of an app: the Redis client and the `Admission` limiter (docs/limits.md), and
the registrations per client address.

`setup_limits(app)` registers three cleanup contexts, in dependency order: `redis_ctx`, the
Redis client of ELOVA_REDIS_MODE (redis_client.py) in `app[REDIS]` (None without Redis
settings), the admission (`app[ADMISSION]`) with its background health check (limiter_health.py),
its fleet lease when ELOVA_LIMIT_FLEET_CONCURRENCY is set (fleet.py), and the registration
limit (`app[REGISTRATION_LIMIT]`, registrations.py) on that client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from service.app_keys import ADMISSION, CONFIG, METRICS, REDIS
from service.config import Config
from service.limits.redis_client import (
    RedisClient,
    SentinelClient,
    make_client,
    make_cluster_client,
)
from service.limits.registrations import registration_limit_ctx
from service.settings.redis import RedisEngine


async def redis_ctx(app: web.Application) -> AsyncIterator[None]:
    """Cleanup context: the client lives as long as the app; closed after the admission."""
    cfg: Config = app[CONFIG]
    engine: RedisEngine = cfg.redis_engine
    timeout = cfg.limits.redis_timeout_seconds
    closing: Any
    if engine.mode == "sentinel":
        assert engine.sentinel_master is not None
        sentinel = SentinelClient(
            engine.sentinels,
            engine.sentinel_master,
            cfg.redis_url,
            timeout=timeout,
            sentinel_password=engine.sentinel_password,
        )
        client: RedisClient | None = sentinel.master
        closing = sentinel
    elif cfg.redis_url is None:
        client = closing = None
    elif engine.mode == "cluster":
        client = closing = make_cluster_client(cfg.redis_url, timeout=timeout)
    else:
        client = closing = make_client(cfg.redis_url, timeout=timeout)
    app[REDIS] = client
    try:
        yield
    finally:
        if closing is not None:
            await closing.aclose()


async def admission_ctx(app: web.Application) -> AsyncIterator[None]:
    from service.limits.admission import Admission
    from service.limits.breaker import CircuitBreaker
    from service.limits.limiter_health import watching

    cfg = app[CONFIG]
    admission = Admission(
        cfg.limits,
        redis=app[REDIS],
        key_prefix=cfg.redis_key_prefix,
        metrics=app[METRICS],
        breaker=CircuitBreaker(
            failure_threshold=cfg.limits.breaker_failures,
            cooldown_seconds=cfg.limits.breaker_cooldown_seconds,
        ),
        timeout_seconds=cfg.limits.redis_timeout_seconds,
        key_layout=cfg.redis_engine.key_layout,
    )
    app[ADMISSION] = admission
    await admission.warm_up()
    fleet = None if admission.fleet is None else asyncio.create_task(admission.fleet.run())
    try:
        async with watching(admission):  # the limiter's health, checked on its own schedule
            yield
    finally:
        if fleet is not None:
            fleet.cancel()
            await asyncio.gather(fleet, return_exceptions=True)
        await admission.close()


def setup_limits(app: web.Application) -> None:
    app.cleanup_ctx.append(redis_ctx)
    app.cleanup_ctx.append(admission_ctx)
    app.cleanup_ctx.append(registration_limit_ctx)
