"""Bad bytes refused on every route, in the route's own error shape.

Asked by the innermost middleware (service/server/error_answers.py: every route and every
other middleware is in place): `refused_input` answers 400, before its handler runs, a
request whose query string, cookies, urlencoded or multipart form, or JSON body breaks the
rule of `service/edge/text_rule.py`; `refused_text` gives the same answer to a handler whose
PostgreSQL statement was refused for its characters (`NOT_TEXT`). The rule, the shapes and
why: docs/decisions/hardening.md, "Bad bytes (issue 21)".
"""

from __future__ import annotations

import logging

from aiohttp import hdrs, web

from service.app_keys import CONFIG
from service.auth.oauth.cors import ALLOW_ORIGIN
from service.auth.oauth.responses import FORM, error_response
from service.auth.pages.rendering import error_page, wants_html
from service.edge.paths import (
    APPROVALS_PATH,
    JWKS_PATH,
    MCP_PATH,
    MCP_RESOURCE_METADATA_PATH,
    OAUTH_METADATA_PATH,
    REGISTER_PATH,
    RESOURCE_METADATA_PATH,
    REVOKE_PATH,
    TOKEN_PATH,
)
from service.edge.text_rule import all_text, is_text, json_has_nul, urlencoded_is_text
from service.errors import OAuthError
from service.mcp import protocol as p

log = logging.getLogger(__name__)

_OAUTH_JSON = {TOKEN_PATH: "invalid_request", REVOKE_PATH: "invalid_request",
               REGISTER_PATH: "invalid_client_metadata"}  # fmt: skip
# The routes browser-based clients call cross-origin (service/auth/oauth/cors.py): their
# refusals carry the same `Access-Control-Allow-Origin: *`, so such a client can read them.
_CORS = {*_OAUTH_JSON, OAUTH_METADATA_PATH, JWKS_PATH, RESOURCE_METADATA_PATH,
         MCP_RESOURCE_METADATA_PATH}  # fmt: skip
_MULTIPART = "multipart/form-data"
_JSON = "application/json"


async def _problem(request: web.Request) -> str | None:
    """Where the request breaks the rule, or None."""
    query = request.raw_path.partition("?")[2]
    if query and not urlencoded_is_text(query):
        return "query"
    if hdrs.COOKIE in request.headers and not _cookies_are_text(request):
        return "cookie"
    if request.path == MCP_PATH or not request.body_exists:
        return None
    if (request.content_length or 0) > request.app[CONFIG].limits.max_body_bytes:
        return None  # over the request bound: the handler's own read refuses it in its shape
    content_type = request.content_type
    if content_type == FORM:
        return None if urlencoded_is_text(await request.read()) else "form"
    if content_type == _MULTIPART:
        try:
            form = await request.post()
        except (UnicodeDecodeError, ValueError):
            return "form"
        return None if all_text(form.keys()) and all_text(form.values()) else "form"
    if content_type == _JSON:
        return "json" if json_has_nul(await request.read()) else None
    return None


def _cookies_are_text(request: web.Request) -> bool:
    # Bytes that are not UTF-8 stay in a header as surrogates; a quoted cookie value may
    # also spell a NUL as an octal escape ("\000"), which only its parse reveals.
    return all(is_text(value) for value in request.headers.getall(hdrs.COOKIE)) and all_text(
        request.cookies.values()
    )


def _refusal(request: web.Request, where: str) -> web.StreamResponse:
    """The 400, logged at info, in the route's shape:

    - /token, /revoke: the OAuth JSON error `invalid_request`; /register:
      `invalid_client_metadata`;
    - /mcp: JSON-RPC -32600 (its body is checked by the envelope, service/mcp/envelope.py,
      after the transport's own checks; here only its query string);
    - every other route: the styled error page for a browser, the OAuth JSON error for the
      rest (as service/server/error_pages.py tells them apart).
    """
    log.info(
        "refused a request whose %s is not text", where,
        extra={"event": "bad_input", "where": where, "path": request.path},
    )  # fmt: skip
    message = f"the {where} must be UTF-8 text without NUL (U+0000) or unpaired surrogates"
    if request.path == MCP_PATH:
        body = p.error_body(None, p.INVALID_REQUEST, f"Invalid Request: {message}")
        return web.Response(body=body, status=400, content_type=_JSON)
    error = _OAUTH_JSON.get(request.path)
    if error is None and wants_html(request):
        return error_page(
            request, "The request could not be read",
            "It contained characters that are not text. Go back and send it again.",
            status=400, back=(APPROVALS_PATH, "Go to your approvals"),
        )  # fmt: skip
    response = error_response(OAuthError(error or "invalid_request", message))
    if request.path in _CORS:
        response.headers.update(ALLOW_ORIGIN)
    return response


async def refused_input(request: web.Request) -> web.StreamResponse | None:
    """The 400 of a routed request whose query, cookies or body are not text; None when
    they are, and for a path no route matches (its 404 or 405)."""
    if request.match_info.http_exception is not None:
        return None
    where = await _problem(request)
    return None if where is None else _refusal(request, where)


def refused_text(request: web.Request) -> web.StreamResponse:
    """The same 400 for a handler whose statement PostgreSQL refused for its characters
    (`NOT_TEXT`: NUL, or text the encoding cannot hold), as defence in depth, instead of a
    500."""
    return _refusal(request, "text")
