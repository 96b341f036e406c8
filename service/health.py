"""/livez, /readyz and the graceful drain that runs the main listener until SIGTERM.

- `/livez` answers from the process alone: a restart cannot fix a database outage, so
  liveness never looks at dependencies.
- `/readyz` is 200 while PostgreSQL answers; Redis down only degrades the limits to
  per-process ones (docs/limits.md), so it is reported (`"redis": "degraded"` while the
  shared limiter does not answer a real script call) but never fails readiness.
- On SIGTERM (or SIGINT) readiness fails first while the listener keeps serving for
  `drain_seconds`, so load balancers stop routing here; then the listener closes, in-flight
  requests get `shutdown_timeout` to finish, and the cleanup contexts close the pools.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from service import connections
from service.config import Config
from service.keys import ADMISSION, DB_POOL, DB_READ_POOL, METRICS, REDIS

log = logging.getLogger(__name__)

# How long the listener keeps serving after readiness fails: a few probe periods of the
# load balancer (compose's HAProxy checks every 2 s; Kubernetes also runs a preStop sleep).
DRAIN_SECONDS = 5.0
CHECK_TIMEOUT_SECONDS = 1.0


@dataclass
class DrainState:
    """Whether this process is shutting down (readiness then fails)."""

    draining: bool = False


DRAIN: web.AppKey[DrainState] = web.AppKey("drain", DrainState)


async def livez(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    app = request.app
    if app[DRAIN].draining:
        return web.json_response({"status": "draining"}, status=503)
    postgresql = await _check_postgresql(app)
    redis = await _check_redis(app)
    ready = postgresql == "ok"
    body = {"status": "ready" if ready else "not_ready", "postgresql": postgresql, "redis": redis}
    return web.json_response(body, status=200 if ready else 503)


async def _check_postgresql(app: web.Application) -> str:
    pool = app.get(DB_POOL)
    if pool is None:
        return "unavailable"
    answered = await _probe("PostgreSQL", lambda: pool.fetchval("SELECT 1"), app[METRICS].db_call)
    reads = app.get(DB_READ_POOL)
    if answered and reads is not None and reads is not pool:  # the read replica serves tools
        answered = await _probe(
            "PostgreSQL read replica", lambda: reads.fetchval("SELECT 1"), app[METRICS].db_call
        )
    return "ok" if answered else "unavailable"


async def _check_redis(app: web.Application) -> str:
    """The shared limiter's state (`Admission.shared_state`: a real script call on the
    limiter's slot, recorded as the "health" Redis operation), never a PING of some node."""
    admission = app.get(ADMISSION)
    if app.get(REDIS) is None or admission is None:
        return "not_configured"
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            state = await admission.shared_state()
    except TimeoutError:
        state = "degraded"
    if state != "ok":
        log.warning("readiness: the shared limiter is degraded (Redis)")
    return state


async def _probe(
    name: str, call: Callable[[], Awaitable[object]], record: Callable[[str, float, bool], None]
) -> bool:
    """Whether the dependency answered `call` within the check timeout; recorded as its
    "health" operation either way."""
    start = time.perf_counter()
    error = True
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS):
            await call()
        error = False
    except Exception as err:
        log.warning("readiness: %s check failed", name, extra={"error_type": type(err).__name__})
    finally:
        record("health", time.perf_counter() - start, error)
    return not error


def begin_drain(app: web.Application) -> None:
    """Fail readiness from now on (idempotent)."""
    state = app[DRAIN]
    if not state.draining:
        state.draining = True
        app[METRICS].set_draining(True)
        log.info("draining: readiness fails, in-flight requests finish")


async def _close_connections_while_draining(
    request: web.Request, response: web.StreamResponse
) -> None:
    # Keep-alive clients would keep reusing this replica; make them reconnect elsewhere.
    if request.app[DRAIN].draining:
        response.force_close()
        response.headers["Connection"] = "close"  # headers are computed before this hook


async def _on_shutdown(app: web.Application) -> None:
    begin_drain(app)  # also when a runner is cleaned up without our signal handling


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
    await runner.cleanup()  # stop listening, wait for in-flight requests, close pools
    log.info("stopped", extra={"shutdown_seconds": round(time.perf_counter() - started, 3)})


async def serve(app: web.Application, cfg: Config, *, drain_seconds: float | None = None) -> None:
    """Run the main listener until SIGTERM/SIGINT, then drain (a second signal skips the wait).

    The drain lasts ELOVA_DRAIN_SECONDS (cfg.drain_seconds) unless the caller says otherwise.
    """
    if drain_seconds is None:
        drain_seconds = cfg.drain_seconds
    runner = web.AppRunner(
        app,
        access_log=None,  # service.logs writes the access line
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


def setup_health(app: web.Application) -> None:
    app[DRAIN] = DrainState()
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.on_response_prepare.append(_close_connections_while_draining)
    app.on_shutdown.append(_on_shutdown)
