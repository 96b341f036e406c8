"""Authorization: access tokens, the bearer check on /mcp, approvals, and the OAuth server."""

from __future__ import annotations

from aiohttp import web

from service.auth import resource_metadata
from service.auth.activity import activity_ctx
from service.auth.oauth import setup_oauth
from service.auth.tokens import TokenService
from service.keys import CONFIG, TOKENS


def setup_auth(app: web.Application) -> None:
    """Token service in app[TOKENS]; resource metadata and JWKS routes; the OAuth server;
    the approval activity recorder (after the pool: its last flush needs it)."""
    app[TOKENS] = TokenService(app[CONFIG])
    app.cleanup_ctx.append(activity_ctx)
    resource_metadata.add_routes(app)
    setup_oauth(app)
