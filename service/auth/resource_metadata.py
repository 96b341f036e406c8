"""Public discovery documents: RFC 9728 protected-resource metadata and the JWKS.

Both are public and identical for every replica, so they carry a short cache lifetime and
allow any origin: browser-based MCP clients fetch them cross-origin before signing in.
"""

from __future__ import annotations

from typing import Any

from aiohttp import hdrs, web

from service.app_keys import CONFIG, TOKENS
from service.auth.caller import ALL_SCOPES
from service.auth.oauth.cors import add_cors_routes
from service.edge.paths import JWKS_PATH, MCP_RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH

RESOURCE_NAME = "Elova"
_PUBLIC_HEADERS = {
    hdrs.CACHE_CONTROL: "public, max-age=300",
    hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: "*",
}


def protected_resource_metadata(resource: str, issuer: str) -> dict[str, Any]:
    return {
        "resource": resource,
        "authorization_servers": [issuer],
        "scopes_supported": list(ALL_SCOPES),
        "bearer_methods_supported": ["header"],
        "resource_name": RESOURCE_NAME,
    }


async def resource_metadata(request: web.Request) -> web.Response:
    cfg = request.app[CONFIG]
    body = protected_resource_metadata(cfg.mcp_resource, cfg.issuer)
    return web.json_response(body, headers=_PUBLIC_HEADERS)


async def jwks(request: web.Request) -> web.Response:
    return web.json_response(request.app[TOKENS].jwks(), headers=_PUBLIC_HEADERS)


def add_routes(app: web.Application) -> None:
    # RFC 9728 §3.1 inserts the well-known segment before the resource's path ("/mcp");
    # the bare path serves clients that look there first.
    app.router.add_get(RESOURCE_METADATA_PATH, resource_metadata)
    app.router.add_get(MCP_RESOURCE_METADATA_PATH, resource_metadata)
    app.router.add_get(JWKS_PATH, jwks)
    add_cors_routes(
        app,
        {
            RESOURCE_METADATA_PATH: "GET, OPTIONS",
            MCP_RESOURCE_METADATA_PATH: "GET, OPTIONS",
            JWKS_PATH: "GET, OPTIONS",
        },
    )
