"""Admission limits (docs/limits.md): the Redis client and the `Admission` limiter of an app.

`setup_limits(app)` registers two cleanup contexts, in dependency order: the Redis client
(`app[REDIS]`, None without Redis settings), then the admission (`app[ADMISSION]`) with
its background health check (watch.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from service.keys import ADMISSION, CONFIG, METRICS, REDIS
from service.limits.redis_client import redis_ctx


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
