"""Authorization of an app: the token service, the approval reads of the authorization
step, the approval activity recorder, resource metadata and JWKS, and the OAuth server."""

from __future__ import annotations

from aiohttp import web

from service.app_keys import APPROVAL_READS, CONFIG, DB_POOL, METRICS, TOKENS
from service.auth import resource_metadata
from service.auth.activity import activity_ctx
from service.auth.authorization import ApprovalReads
from service.auth.routes import setup_oauth
from service.auth.tokens import TokenService


def setup_auth(app: web.Application) -> None:
    """Token service in app[TOKENS]; the approval reads of the authorization step in
    app[APPROVAL_READS]; resource metadata and JWKS routes; the OAuth server; the approval
    activity recorder (after the pool: its last flush needs it)."""
    cfg = app[CONFIG]
    app[TOKENS] = TokenService(cfg)
    timeout = min(10.0, cfg.limits.request_deadline_seconds)
    app[APPROVAL_READS] = ApprovalReads(lambda: app[DB_POOL], app[METRICS], timeout)
    app.cleanup_ctx.append(activity_ctx)
    resource_metadata.add_routes(app)
    setup_oauth(app)
