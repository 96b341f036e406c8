"""Admission limits (docs/limits.md): the Redis client and the `Admission` limiter of an app.

`setup_limits(app)` registers two cleanup contexts, in dependency order: `redis_ctx`, the
Redis client of ELOVA_REDIS_MODE (redis_client.py) in `app[REDIS]` (None without Redis
settings), then the admission (`app[ADMISSION]`) with its background health check
(watch.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from service.config import Config
from service.keys import ADMISSION, CONFIG, METRICS, REDIS
from service.limits.redis_client import (
    RedisClient,
    SentinelClient,
    make_client,
    make_cluster_client,
)
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
    from service.limits.watch import watching

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
    )
    app[ADMISSION] = admission
    await admission.warm_up()
    try:
        async with watching(admission):  # the limiter's health, checked on its own schedule
            yield
    finally:
        await admission.close()


def setup_limits(app: web.Application) -> None:
    app.cleanup_ctx.append(redis_ctx)
    app.cleanup_ctx.append(admission_ctx)
