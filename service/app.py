"""The app factory: configuration, resources in dependency order, routes, and the middleware
chain, listed once. No logic here."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from service.app_keys import CLOCK, CONFIG
from service.config import Config


def wall_clock() -> datetime:
    return datetime.now(UTC)


def create_app(cfg: Config) -> web.Application:
    from service.audit.trail import setup_audit
    from service.auth.setup import setup_auth
    from service.limits.setup import setup_limits
    from service.mcp.setup import setup_mcp
    from service.observability.metrics.listener import setup_metrics
    from service.observability.tracing.hooks import setup_tracing
    from service.server.access_log import setup_access_log
    from service.server.body_deadline import bounded_reading
    from service.server.error_answers import answer_errors
    from service.server.health import setup_health
    from service.server.overload.shedding import setup_shedding
    from service.store.db import pool_ctx
    from service.tools.setup import setup_tools

    app = web.Application(client_max_size=cfg.limits.max_body_bytes)
    app[CONFIG] = cfg
    app[CLOCK] = wall_clock
    setup_metrics(app)  # first: every later resource may record into it
    access_log = setup_access_log(app)  # the refusal sampler, the X-Request-Id hook
    setup_audit(app)  # the audit writer (drained last at shutdown)
    shed_overload, count_in_flight = setup_shedding(app)  # the overload state, its lag probe
    setup_tracing(app)  # before the pools: their connections record statements when traced
    app.cleanup_ctx.append(pool_ctx)
    setup_limits(app)  # Redis connection, the admission limiter, the registration limit
    setup_auth(app)  # token service, resource metadata, OAuth endpoints
    setup_tools(app)  # cursor codec
    setup_mcp(app)  # catalog, sessions, the /mcp endpoint
    setup_health(app)  # /livez, /readyz, the drain
    # The middleware chain, outermost first (docs/architecture.md, "The middleware chain").
    app.middlewares.extend(
        (
            shed_overload,  # overloaded: 503 at once, before the request log, auth, the database
            access_log,  # the request id, the HTTP metrics, the access line
            bounded_reading,  # the body deadline, before anything reads a body
            count_in_flight,  # what the in-flight limit counts, once the body is in
            answer_errors,  # innermost: bad input, error pages, the audit 503
        )
    )
    return app
