"""What a request the routes do not answer gets: a styled page for a browser, JSON for the rest.

The innermost middleware (service/server/error_answers.py) asks here about what handlers
and aiohttp's router raise: 404 (no such path), 405 (the path exists, not the method; the
Allow header is kept), any other HTTP error raised on the way (a form over the body limit:
413), and an unexpected exception (500, logged with the request id, which the page shows).
Every handler of /mcp and of the OAuth JSON endpoints answers its own errors, so what those
send to API clients is unchanged. A non-browser's unexpected exception is left to the
request-log middleware (its JSON 500).
"""

from __future__ import annotations

import logging

from aiohttp import hdrs, web

from service.app_keys import REQUEST_ID
from service.auth.pages.rendering import error_page, wants_html
from service.edge.paths import APPROVALS_PATH
from service.errors import Unavailable

log = logging.getLogger(__name__)

_JSON_ERRORS = {404: "not_found", 405: "method_not_allowed"}
_PAGES = {
    404: ("Page not found", "There is no page at this address. Check the link."),
    405: (
        "This page cannot do that",
        "The address exists, but not for this kind of request. Open it from a link or a form.",
    ),
    413: ("The form is too large", "Go back and send a shorter form."),
    503: ("Elova is busy", "Your request could not be completed right now. Try again in a moment."),
}


def _html_error(request: web.Request, status: int, reason: str) -> web.Response:
    title, message = _PAGES.get(status, (reason, "The request could not be answered."))
    return error_page(
        request, title, message, status=status, note="",
        back=(APPROVALS_PATH, "Go to your approvals"),
    )  # fmt: skip


def http_error_answer(request: web.Request, exc: web.HTTPException) -> web.Response | None:
    """The page or JSON of an HTTP error raised on the way; None to let it through (a
    status under 400, or one a non-browser gets as aiohttp writes it)."""
    if exc.status < 400:
        return None
    if wants_html(request):
        response = _html_error(request, exc.status, exc.reason)
    elif exc.status in _JSON_ERRORS:
        response = web.json_response(
            {"error": _JSON_ERRORS[exc.status], "message": exc.reason}, status=exc.status
        )
    else:
        return None
    if "Allow" in exc.headers:
        response.headers["Allow"] = exc.headers["Allow"]
    return response


def unavailable_page(request: web.Request, err: Unavailable) -> web.Response | None:
    """For a browser, the 503 page of a request the service could not record in time (its
    audit line found no room), with Retry-After; None for the rest (their JSON 503)."""
    if not wants_html(request):
        return None
    page = _html_error(request, 503, "Service Unavailable")
    page.headers[hdrs.RETRY_AFTER] = str(err.retry_after)
    return page


def crash_page(request: web.Request) -> web.Response | None:
    """The 500 page of an unexpected exception for a browser (logged with the request id,
    which the page shows); None for the rest, left to the request-log middleware."""
    if not wants_html(request):
        return None
    request_id = request.get(REQUEST_ID, "")
    log.exception("unhandled error")
    return error_page(
        request, "Something went wrong",
        "The server could not answer this page. Try again in a moment.",
        status=500, note=f"Reference: {request_id}" if request_id else "",
        back=(APPROVALS_PATH, "Go to your approvals"),
    )  # fmt: skip
