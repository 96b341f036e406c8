"""The authorization endpoint (GET /authorize): validate, then sign-in or the approval page.

A request that fails before its client and redirect URI are trusted is shown on a page; a
later failure goes back to the redirect URI (with `state` and `iss`). A valid request from a
browser without a live session goes to sign-in and comes back here afterwards; with one, the
approval page is shown. Nothing is granted by a GET: only the approval form's POST grants.
"""

from __future__ import annotations

from aiohttp import web

from service.app_keys import CONFIG
from service.auth.oauth.authorization_requests import parse_authorization_request, refusal_location
from service.auth.pages import consent
from service.auth.pages.rendering import error_page, security_headers, see_other
from service.auth.pages.signin import signin_location
from service.auth.pages.signin_sessions import current_session
from service.edge.paths import AUTHORIZE_PATH
from service.errors import PageRefusal, RedirectRefusal


async def authorize(request: web.Request) -> web.Response:
    """GET /authorize."""
    cfg = request.app[CONFIG]
    try:
        req = await parse_authorization_request(request.app, request.query)
    except PageRefusal as err:
        return error_page(request, err.title, err.message, status=400)
    except RedirectRefusal as err:
        return web.Response(
            status=302,
            headers={"Location": refusal_location(err, cfg.issuer), **security_headers()},
        )
    session = await current_session(request)
    if session is None:
        return see_other(signin_location(f"{AUTHORIZE_PATH}?{req.query()}"))
    return await consent.show(request, req, session)
