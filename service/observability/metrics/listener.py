"""The /metrics listener of one app, and what is measured only at scrape time or by a probe.

`setup_metrics` gives an app its Metrics (app_metrics.py) and registers both:
`metrics_listener_ctx` serves /metrics, and the health probes (app[PROBES]), on its own port
(`ELOVA_METRICS_PORT`) with its own runner, so scrapes and probes never compete with MCP
traffic and keep working while the main listener drains, and runs the loop lag probe;
`PoolCollector` reads the PostgreSQL pool's connections when scraped.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable

from aiohttp import hdrs, web
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as CONTENT_TYPE_OPENMETRICS
from prometheus_client.registry import Collector

from service.app_keys import CONFIG, DB_POOL, METRICS, PROBES
from service.edge.paths import METRICS_PATH
from service.observability.metrics.app_metrics import Metrics
from service.observability.metrics.labels import LOOP_PROBE_SECONDS, PREFIX


class PoolCollector(Collector):
    """asyncpg pool connections by state, read from app[DB_POOL] at scrape time."""

    def __init__(self, app: web.Application) -> None:
        self._app = app

    def collect(self) -> Iterable[Metric]:
        pool = self._app.get(DB_POOL)
        if pool is None:
            return []
        size, idle = pool.get_size(), pool.get_idle_size()
        by_state = GaugeMetricFamily(
            f"{PREFIX}_db_pool_connections",
            "Open PostgreSQL connections of the pool, by state.",
            labels=("state",),
        )
        by_state.add_metric(("idle",), idle)
        by_state.add_metric(("in_use",), max(size - idle, 0))
        most = GaugeMetricFamily(
            f"{PREFIX}_db_pool_max_connections",
            "Most connections the pool opens.",
            value=pool.get_max_size(),
        )
        least = GaugeMetricFamily(
            f"{PREFIX}_db_pool_min_connections",
            "Connections the pool keeps open.",
            value=pool.get_min_size(),
        )
        return [by_state, most, least]


def setup_metrics(app: web.Application) -> None:
    """The app's Metrics, the pool collector and the /metrics listener."""
    metrics = Metrics(app.get(CONFIG))
    metrics.registry.register(PoolCollector(app))
    app[METRICS] = metrics
    app.cleanup_ctx.append(metrics_listener_ctx)
    app.on_startup.append(_register_routes)


async def _register_routes(app: web.Application) -> None:
    # On startup every setup function has added its routes: the router is final.
    app[METRICS].set_routes(r.canonical for r in app.router.resources())


async def _scrape(request: web.Request) -> web.Response:
    # OpenMetrics (with exemplars: trace ids on latency buckets) when the scraper accepts
    # it, as Prometheus does when exemplar storage is on; the classic text otherwise.
    openmetrics = OPENMETRICS in request.headers.get(hdrs.ACCEPT, "")
    body = request.app[METRICS].exposition(openmetrics)
    kind = CONTENT_TYPE_OPENMETRICS if openmetrics else CONTENT_TYPE_PLAIN_0_0_4
    return web.Response(body=body, headers={hdrs.CONTENT_TYPE: kind})


OPENMETRICS = "application/openmetrics-text"
Probe = Callable[[web.Application], Awaitable[web.Response]]
Handler = Callable[[web.Request], Awaitable[web.Response]]


async def metrics_listener_ctx(app: web.Application) -> AsyncIterator[None]:
    """Serve /metrics on ELOVA_METRICS_PORT with a runner of its own; measure loop lag."""
    cfg, metrics = app[CONFIG], app[METRICS]
    lag_task = asyncio.create_task(_probe_loop_lag(metrics), name="elova-loop-lag")
    runner: web.AppRunner | None = None
    if cfg.metrics_port is not None:
        scrape_app = web.Application()
        scrape_app[METRICS] = metrics
        scrape_app.router.add_get(METRICS_PATH, _scrape)
        for path, probe in app.get(PROBES, {}).items():
            scrape_app.router.add_get(path, _probe_of(app, probe))
        runner = web.AppRunner(scrape_app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, cfg.host, cfg.metrics_port)
        await site.start()
        metrics.listen_port = _bound_port(runner)
    try:
        yield
    finally:
        lag_task.cancel()
        if runner is not None:
            await runner.cleanup()
        metrics.listen_port = None


def _probe_of(app: web.Application, probe: Probe) -> Handler:
    """A handler answering `probe` of the main app (its state, pools and drain)."""

    async def answer(request: web.Request) -> web.Response:
        return await probe(app)

    return answer


def _bound_port(runner: web.AppRunner) -> int | None:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return None


async def _probe_loop_lag(metrics: Metrics) -> None:
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(LOOP_PROBE_SECONDS)
        metrics.loop_lag.observe(max(loop.time() - start - LOOP_PROBE_SECONDS, 0.0))
