"""/livez and /readyz (STUB: replaced by the operability work)."""

from __future__ import annotations

from aiohttp import web


async def livez(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def setup_health(app: web.Application) -> None:
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", livez)
