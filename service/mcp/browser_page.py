"""What a browser opening /mcp sees: a small page saying what this address is and how to
connect an MCP client to it (issue 54: it got the JSON 405 meant for clients).

Only a GET that names text/html in Accept, and neither text/event-stream nor a session, is
a browser's: a client's GET (it asks for an event stream) keeps its 405.
"""

from __future__ import annotations

from aiohttp import hdrs, web

from service.app_keys import CONFIG
from service.auth.pages.rendering import render, wants_html
from service.edge import headers as h
from service.mcp.titles import WEBSITE_URL

_EVENT_STREAM = "text/event-stream"


def is_browser_visit(request: web.Request) -> bool:
    return (
        request.method == "GET"
        and h.SESSION_ID not in request.headers
        and _EVENT_STREAM not in request.headers.get(hdrs.ACCEPT, "").lower()
        and wants_html(request)
    )


def endpoint_page(request: web.Request) -> web.Response:
    """200: the URL to give a client (the OAuth resource, byte for byte) and the docs."""
    context = {"mcp_url": request.app[CONFIG].mcp_resource, "docs_url": WEBSITE_URL}
    return render(request, "mcp_endpoint.html", context)
