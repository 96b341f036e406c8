"""Until the database schema is at this release's version, every route but the probes and
the stylesheet is refused with one 503 naming `elova-mcp migrate`, in the route's own error
shape (issue 54: an unmigrated database answered /register with a 500). The schema is read
at most once a second meanwhile (service/server/health.py `check_schema`), and never again
once it is at this release's version.
"""

from __future__ import annotations

from aiohttp import web

from service.app_keys import DB_POOL, DRAIN
from service.auth.oauth.cors import ALLOW_ORIGIN
from service.auth.oauth.responses import error_response
from service.auth.pages.rendering import error_page, wants_html
from service.edge.paths import (
    JWKS_PATH,
    LIVEZ_PATH,
    MCP_PATH,
    MCP_RESOURCE_METADATA_PATH,
    OAUTH_METADATA_PATH,
    READYZ_PATH,
    REGISTER_PATH,
    RESOURCE_METADATA_PATH,
    REVOKE_PATH,
    STYLESHEET_PATH,
    TOKEN_PATH,
)
from service.errors import OAuthError
from service.mcp import protocol as p
from service.server.health import check_schema

MESSAGE = "the database schema is not at this release's version: run `elova-mcp migrate`"
RECHECK_SECONDS = 1.0
_SERVED = frozenset({LIVEZ_PATH, READYZ_PATH, STYLESHEET_PATH})  # they answer on their own
# The OAuth JSON endpoints and discovery documents: their error shape, and CORS for all.
_OAUTH_JSON = frozenset(
    (TOKEN_PATH, REGISTER_PATH, REVOKE_PATH, OAUTH_METADATA_PATH, JWKS_PATH)
    + (RESOURCE_METADATA_PATH, MCP_RESOURCE_METADATA_PATH)
)


async def refused_unmigrated(request: web.Request) -> web.Response | None:
    """The 503 of a request while the schema is not migrated; None once it is (one
    attribute read), for the probes, and when the check itself failed or no pool is set
    (the request then meets what the database says)."""
    app = request.app
    if app[DRAIN].migrated or request.path in _SERVED or app.get(DB_POOL) is None:
        return None
    if await check_schema(app, reuse_seconds=RECHECK_SECONDS) != "not_migrated":
        return None
    return _refusal(request)


def _refusal(request: web.Request) -> web.Response:
    if request.path == MCP_PATH:
        body = p.error_body(None, p.INVALID_REQUEST, f"Service Unavailable: {MESSAGE}")
        return web.Response(body=body, status=503, content_type="application/json")
    if request.path not in _OAUTH_JSON and wants_html(request):
        return error_page(
            request, "Elova is not set up yet",
            "Its database has not been prepared for this version. The operator runs"
            " `elova-mcp migrate`; then this page works.", status=503, note="",
        )  # fmt: skip
    response = error_response(OAuthError("temporarily_unavailable", MESSAGE, status=503))
    if request.path in _OAUTH_JSON:
        response.headers.update(ALLOW_ORIGIN)
    return response
