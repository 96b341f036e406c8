"""/livez, /readyz, and the drain state (`DrainState`, app[DRAIN]) that fails readiness once
shutdown begins.

Both are served on the metrics listener too (app[PROBES]). `livez` answers from the process
alone; `readyz` is 200 while PostgreSQL answers, its schema is at this release's version and
(with a fleet-wide cap) this replica holds a lease of it, Redis only reported; `begin_drain`
makes readiness fail from then on and closes kept-alive connections after their response
(service/server/listener.py calls it on SIGTERM or SIGINT, and app shutdown calls it too).
Why each looks at what it does: docs/decisions/ops.md (liveness, readiness, drain).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import asyncpg
from aiohttp import web

from service.app_keys import ADMISSION, DB_POOL, DB_READ_POOL, DRAIN, METRICS, PROBES, REDIS
from service.edge.paths import LIVEZ_PATH, READYZ_PATH
from service.store.migrate import applied_version, release_version

log = logging.getLogger(__name__)

ResponseHook = Callable[[web.Request, web.StreamResponse], Awaitable[None]]

CHECK_TIMEOUT_SECONDS = 1.0


@dataclass
class DrainState:
    """Whether this process is shutting down (readiness then fails)."""

    draining: bool = False
    migrated: bool = False  # the schema was seen at this release's version
    # Until then: when it was last read, what that said, and what was last logged (a
    # warning once, then only when the outcome or the version changes).
    schema_checked_at: float = float("-inf")
    schema_outcome: str = "unknown"
    schema_logged: tuple[str, int | None] | None = None


async def livez(request: web.Request) -> web.Response:
    """The process alone: liveness never looks at dependencies."""
    return await liveness(request.app)


async def liveness(app: web.Application) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    """`readiness` of the request's app."""
    return await readiness(request.app)


async def readiness(app: web.Application) -> web.Response:
    """200 while PostgreSQL answers and its schema is at this release's version (or newer:
    a newer release migrated first, during a rolling upgrade); until then 503 with
    `"schema": "not_migrated"`. Once seen migrated, the schema is not read again (it never
    goes back). Redis down only degrades the limits to per-process ones (docs/limits.md),
    so it is reported (`"redis": "degraded"` while the shared limiter does not answer a real
    script call) and fails readiness only with a fleet-wide cap, while this replica holds no
    lease of it (`"fleet": "no_lease"`: it admits no tool call then)."""
    if app[DRAIN].draining:
        return web.json_response({"status": "draining"}, status=503)
    # Both at once, each bounded: the answer comes within about one check timeout.
    postgresql, redis = await asyncio.gather(_check_postgresql(app), _check_redis(app))
    schema = await check_schema(app) if postgresql == "ok" else "ok"
    fleet = _check_fleet(app)
    ready = postgresql == "ok" and schema == "ok" and fleet == "ok"
    body = {"status": "ready" if ready else "not_ready", "postgresql": postgresql, "redis": redis}
    if schema != "ok":
        body["schema"] = schema  # named only when it is what fails readiness
    if fleet != "ok":
        body["fleet"] = fleet  # likewise
    return web.json_response(body, status=200 if ready else 503)


async def _check_postgresql(app: web.Application) -> str:
    pool = app.get(DB_POOL)
    if pool is None:
        return "unavailable"
    probes = [_probe("PostgreSQL", lambda: _select_one(pool), app[METRICS].db_call)]
    reads = app.get(DB_READ_POOL)
    if reads is not None and reads is not pool:  # the read replica serves tools
        probes.append(
            _probe("PostgreSQL read replica", lambda: _select_one(reads), app[METRICS].db_call)
        )
    answered = await asyncio.gather(*probes)
    return "ok" if all(answered) else "unavailable"


def _check_fleet(app: web.Application) -> str:
    """ok, or no_lease while a fleet-wide cap is set and this replica holds no lease of it
    (service/limits/fleet.py)."""
    admission = app.get(ADMISSION)
    fleet = None if admission is None else admission.fleet
    return "ok" if fleet is None or fleet.holds_lease else "no_lease"


async def check_schema(app: web.Application, *, reuse_seconds: float = 0.0) -> str:
    """ok once the schema is at this release's version, else not_migrated (unknown when the
    check itself failed). Until it is, an answer read less than `reuse_seconds` ago is
    reused (the requests refused meanwhile, service/server/schema_gate.py, read it at most
    that often); readiness reads it afresh."""
    state = app[DRAIN]
    if state.migrated:
        return "ok"
    now = time.monotonic()
    if now - state.schema_checked_at < reuse_seconds:
        return state.schema_outcome
    state.schema_checked_at = now
    pool = app[DB_POOL]
    try:
        async with asyncio.timeout(CHECK_TIMEOUT_SECONDS), pool.acquire() as conn:
            version = await applied_version(conn)
    except Exception as err:
        if _changed(state, "unknown", None):
            log.warning("readiness: schema check failed", extra={"error_type": type(err).__name__})
        state.schema_outcome = "unknown"
        return "unknown"
    if version < release_version():
        if _changed(state, "not_migrated", version):
            log.warning(
                "the database schema is not at this release's version: run `elova-mcp migrate`",
                extra={"schema_version": version, "release_schema_version": release_version()},
            )
        state.schema_outcome = "not_migrated"
        return "not_migrated"
    if state.schema_logged is not None:
        log.info(
            "the database schema is at this release's version", extra={"schema_version": version}
        )
    state.migrated = True
    state.schema_outcome = "ok"
    return "ok"


def _changed(state: DrainState, outcome: str, version: int | None) -> bool:
    """Whether this outcome differs from the one last logged (and remember it)."""
    if state.schema_logged == (outcome, version):
        return False
    state.schema_logged = (outcome, version)
    return True


async def _select_one(pool: asyncpg.Pool) -> None:
    """SELECT 1 with the connection's acquire and release bounded too: a statement cancelled
    on a server that went silent would otherwise hold the release (and this check) until
    its cancel request gives up; past the bound the connection is closed instead."""
    conn = await pool.acquire(timeout=CHECK_TIMEOUT_SECONDS)
    try:
        await conn.fetchval("SELECT 1", timeout=CHECK_TIMEOUT_SECONDS)
    finally:
        await pool.release(conn, timeout=CHECK_TIMEOUT_SECONDS)


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


def _close_connections_while_draining(state: DrainState) -> ResponseHook:
    """The response hook that, while draining, closes each connection after its answer:
    keep-alive clients would keep reusing this replica; make them reconnect elsewhere."""

    async def hook(request: web.Request, response: web.StreamResponse) -> None:
        if state.draining:
            response.force_close()
            response.headers["Connection"] = "close"  # headers are computed before this hook

    return hook


async def _on_shutdown(app: web.Application) -> None:
    begin_drain(app)  # also when a runner is cleaned up without our signal handling


def setup_health(app: web.Application) -> None:
    state = app[DRAIN] = DrainState()
    app.router.add_get(LIVEZ_PATH, livez)
    app.router.add_get(READYZ_PATH, readyz)
    app[PROBES] = {LIVEZ_PATH: liveness, READYZ_PATH: readiness}  # the metrics listener's too
    app.on_response_prepare.append(_close_connections_while_draining(state))
    app.on_shutdown.append(_on_shutdown)
    app.on_startup.append(_check_schema_at_start)


async def _check_schema_at_start(app: web.Application) -> None:
    """Read the schema's version once before serving, so a migrated replica's first probe
    needs no extra query (a probe that comes while the loop lags must not fail on it)."""
    if app.get(DB_POOL) is not None:
        await check_schema(app)
