"""`setup_limits(app)`: the Redis client and the admission live and die with the app."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from service.app_keys import ADMISSION, CONFIG, METRICS, REDIS
from service.config import Config
from service.limits.setup import setup_limits
from service.observability.metrics.app_metrics import Metrics
from tests.limits.conftest import make_caller


async def _started(cfg: Config) -> tuple[web.Application, web.AppRunner]:
    app = web.Application()
    app[CONFIG] = cfg
    app[METRICS] = Metrics()
    setup_limits(app)
    runner = web.AppRunner(app)
    await runner.setup()
    return app, runner


async def test_app_gets_a_warm_shared_admission(make_config: Callable[..., Config]) -> None:
    app, runner = await _started(make_config())
    try:
        assert app[REDIS] is not None
        admission = app[ADMISSION]
        grant = await admission.acquire("setup-1", make_caller())
        assert grant.shared
        await admission.release(grant)
    finally:
        await runner.cleanup()


async def test_app_without_redis_limits_per_process(make_config: Callable[..., Config]) -> None:
    app, runner = await _started(make_config(REDIS_URL=None, LIMIT_GLOBAL_CONCURRENCY="1"))
    try:
        assert app[REDIS] is None
        admission = app[ADMISSION]
        grant = await admission.acquire("setup-2", make_caller())
        assert not grant.shared and not admission.degraded
        await admission.release(grant)
    finally:
        await runner.cleanup()
