"""Authorization: access tokens, the bearer check on /mcp, approvals, and (later) OAuth."""

from __future__ import annotations

from aiohttp import web

from service.auth import metadata
from service.auth.tokens import TokenService
from service.keys import CONFIG, TOKENS


def setup_auth(app: web.Application) -> None:
    """Token service in app[TOKENS]; resource metadata and JWKS routes."""
    app[TOKENS] = TokenService(app[CONFIG])
    metadata.add_routes(app)
