"""The app factory: configuration, resources in dependency order, routes. No logic here."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from service.config import Config
from service.keys import CLOCK, CONFIG


def wall_clock() -> datetime:
    return datetime.now(UTC)


def create_app(cfg: Config) -> web.Application:
    from service import connections, health, shedding
    from service.audit import setup_audit
    from service.auth import setup_auth
    from service.error_answers import setup_error_answers
    from service.limits import setup_limits
    from service.logs import setup_request_log
    from service.mcp import setup_mcp
    from service.metrics_listener import setup_metrics
    from service.store.db import pool_ctx
    from service.tools.setup import setup_tools
    from service.tracing import setup_tracing

    app = web.Application(client_max_size=cfg.limits.max_body_bytes)
    app[CONFIG] = cfg
    app[CLOCK] = wall_clock
    setup_metrics(app)  # first: every later resource may record into it
    setup_request_log(app)  # request ids and the access line, outermost middleware
    setup_audit(app)  # the audit writer (drained last at shutdown)
    connections.setup_reading(app)  # the body deadline, before anything reads a body
    shedding.setup_shedding(app)  # overloaded: 503 at once, before auth and the database
    setup_tracing(app)  # before the pools: their connections record statements when traced
    app.cleanup_ctx.append(pool_ctx)
    setup_limits(app)  # Redis connection and the admission limiter
    setup_auth(app)  # token service, resource metadata, OAuth endpoints
    setup_tools(app)  # cursor codec
    setup_mcp(app)  # catalog, sessions, the /mcp endpoint
    health.setup_health(app)
    setup_error_answers(app)  # last, so innermost: bad input, error pages, the audit 503
    return app
