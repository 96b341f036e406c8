"""The main listener: serve until SIGTERM/SIGINT, then the graceful drain.

On the first signal readiness fails (service/server/health.py) while the listener keeps serving
for `drain_seconds`, so load balancers stop routing here (every response meanwhile says
`Connection: close`); then the listener closes, idle keep-alive connections are closed,
in-flight requests get `shutdown_timeout` to finish (their connections close after the
response), and the cleanup contexts close the pools. A second signal skips the rest of the
wait. The order and the timeline: docs/operations.md, "Rolling restarts".
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from aiohttp import web

from service.config import Config
from service.server import connections
from service.server.health import begin_drain

log = logging.getLogger(__name__)

# How long the listener keeps serving after readiness fails: a few probe periods of the
# load balancer (compose's HAProxy checks every 2 s; Kubernetes also runs a preStop sleep).
DRAIN_SECONDS = 5.0


async def drain(
    app: web.Application, runner: web.AppRunner, drain_seconds: float, skip: asyncio.Event
) -> None:
    """Readiness fails, serve on for drain_seconds (unless `skip` is set), then stop."""
    begin_drain(app)
    if drain_seconds > 0:
        try:
            async with asyncio.timeout(drain_seconds):
                await skip.wait()
        except TimeoutError:
            pass
    started = time.perf_counter()
    for site in list(runner.sites):
        await site.stop()  # new connections are refused from here on
    log.info("listener closed: in-flight requests finish")
    await runner.cleanup()  # close idle connections, wait for in-flight requests, close pools
    log.info("stopped", extra={"shutdown_seconds": round(time.perf_counter() - started, 3)})


async def serve(app: web.Application, cfg: Config, *, drain_seconds: float | None = None) -> None:
    """Run the main listener until SIGTERM/SIGINT, then drain (a second signal skips the wait).

    The drain lasts ELOVA_DRAIN_SECONDS (cfg.drain_seconds) unless the caller says otherwise.
    """
    if drain_seconds is None:
        drain_seconds = cfg.drain_seconds
    runner = web.AppRunner(
        app,
        access_log=None,  # service/server/access_log.py writes the access line
        handle_signals=False,
        shutdown_timeout=shutdown_timeout(cfg),
    )
    await runner.setup()
    site = connections.listener_site(runner, cfg)  # connection cap, slow-client deadlines
    await site.start()
    log.info("listening", extra={"host": cfg.host, "port": cfg.port})
    loop = asyncio.get_running_loop()
    stop, skip = asyncio.Event(), asyncio.Event()

    def on_signal() -> None:
        (skip if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        await stop.wait()
        log.info("signal received: shutting down")
        await drain(app, runner, drain_seconds, skip)
    except BaseException:
        await runner.cleanup()  # cancelled or failed before the drain finished
        raise
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def shutdown_timeout(cfg: Config) -> float:
    """How long in-flight requests may still run once the listener closed."""
    return cfg.limits.request_deadline_seconds + cfg.limits.lease_grace_seconds
