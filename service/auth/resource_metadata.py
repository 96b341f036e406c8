"""Public discovery documents: RFC 9728 protected-resource metadata and the JWKS.

Both are public and identical for every replica, so they carry a short cache lifetime and
allow any origin: browser-based MCP clients fetch them cross-origin before signing in. On a
loopback public URL (the demo), a client that came by another loopback name (localhost for
127.0.0.1) is about to refuse the resource as not its URL: the console says which to use.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from service.app_keys import CONFIG, TOKENS
from service.auth.caller import ALL_SCOPES
from service.auth.oauth.cors import add_cors_routes
from service.edge.paths import JWKS_PATH, MCP_RESOURCE_METADATA_PATH, RESOURCE_METADATA_PATH

log = logging.getLogger(__name__)

RESOURCE_NAME = "Elova"
_LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
# The other loopback names already warned about (one line each, not one a request).
_WARNED: set[str] = set()
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
    _warn_of_another_loopback_name(request.headers.get(hdrs.HOST), cfg.mcp_resource)
    return web.json_response(body, headers=_PUBLIC_HEADERS)


def _warn_of_another_loopback_name(host: str | None, resource: str) -> None:
    """The resource is `resource` byte for byte (tokens name it as their audience); a
    client configured as http://localhost:PORT/mcp on a 127.0.0.1 public URL fails its
    OAuth on that. Say at once, on the console, which URL to configure."""
    ours = urlsplit(resource).hostname
    if host is None or ours not in _LOOPBACK or host in _WARNED:
        return
    try:
        name = urlsplit("//" + host).hostname
    except ValueError:
        return
    if name in _LOOPBACK and name != ours and len(_WARNED) < 16:
        _WARNED.add(host)
        log.warning(
            "a client came as http://%s: configure it with %s exactly (another loopback"
            " name is another OAuth resource, and its sign-in fails)", host, resource,
            extra={"event": "wrong_loopback_name", "host": host, "resource": resource},
        )  # fmt: skip


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
