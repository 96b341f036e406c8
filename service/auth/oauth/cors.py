"""CORS for the endpoints browser-based MCP clients call cross-origin.

`/register`, `/token`, `/revoke` and the public metadata documents (authorization server,
protected resource, JWKS) answer any origin, without credentials: `Access-Control-Allow-
Origin: *` on every answer (errors included, so a browser client can read the OAuth error),
and a preflight (`OPTIONS`) that admits POST/GET with the headers such clients send. None of
these endpoints reads cookies, so a wildcard origin exposes nothing a script could not
already get with curl. The sign-in, approval and approvals pages carry no CORS headers: they
stay same-origin (their forms are protected by CSRF tokens and their CSP).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from service.edge import headers as h

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ALLOW_ORIGIN: dict[str, str] = {hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: "*"}
ALLOWED_HEADERS = ", ".join(
    (hdrs.AUTHORIZATION, hdrs.CONTENT_TYPE, h.PROTOCOL_VERSION, hdrs.ACCEPT)
)
PREFLIGHT_MAX_AGE = "86400"
# A requested header list is echoed only when it is a plain list of header names.
_HEADER_LIST = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*")


def with_cors(handler: Handler) -> Handler:
    """`handler` with `Access-Control-Allow-Origin: *` on every answer it gives."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = await handler(request)
        response.headers.update(ALLOW_ORIGIN)
        return response

    return answer


def preflight(methods: str) -> Handler:
    async def options(request: web.Request) -> web.StreamResponse:
        asked = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "").strip()
        headers = asked if asked and _HEADER_LIST.fullmatch(asked) else ALLOWED_HEADERS
        return web.Response(
            status=204,
            headers={
                **ALLOW_ORIGIN,
                hdrs.ACCESS_CONTROL_ALLOW_METHODS: methods,
                hdrs.ACCESS_CONTROL_ALLOW_HEADERS: headers,
                hdrs.ACCESS_CONTROL_MAX_AGE: PREFLIGHT_MAX_AGE,
            },
        )

    return options


def add_cors_routes(app: web.Application, paths: dict[str, str]) -> None:
    """A preflight route for each path (`path: "POST, OPTIONS"`)."""
    for path, methods in paths.items():
        app.router.add_route("OPTIONS", path, preflight(methods))
