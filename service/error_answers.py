"""The innermost middleware: the answer of a request whose input is not text, whose audit
line found no room, or whose handler raised an HTTP error or failed unexpectedly.

Each answer is its own module's: service/bad_input.py (bytes that are not text, in the
route's error shape), service/audit (503 with Retry-After when the audit queue stays full),
service/auth/oauth/error_pages.py (404/405/413 and a crash: a page for a browser, JSON for
the rest). They share one layer because every aiohttp middleware layer costs each request
about 5.5k CPU instructions (callgrind, ~1 % of a refused call) whether or not it has
anything to do, and a flood's refusal pays it on every request (docs/benchmarks.md).

The order is the one the three separate layers had, innermost first: bad input, then HTTP
errors and crashes (a browser's crash page wins over the audit 503, as before), then the
audit 503 for the rest. Registered last, so every route and every other middleware is in
place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from service.audit import unavailable_answer
from service.auth.oauth.error_pages import crash_page, http_error_answer
from service.bad_input import reads_body, refused_body, refused_head, refused_text
from service.errors import NOT_TEXT, AuditUnavailable

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def answer_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        try:
            # Sync for /mcp, whose body is not read here: no coroutine a request.
            refusal = refused_head(request)
            if refusal is None and reads_body(request):
                refusal = await refused_body(request)
            if refusal is not None:
                return refusal
            return await handler(request)
        except NOT_TEXT:
            return refused_text(request)
    except web.HTTPException as exc:
        answer = http_error_answer(request, exc)
        if answer is None:
            raise
        return answer
    except Exception as err:
        page = crash_page(request)
        if page is not None:
            return page
        if isinstance(err, AuditUnavailable):
            return unavailable_answer(err)
        raise


def setup_error_answers(app: web.Application) -> None:
    """Register the middleware; call it last, so that it runs innermost."""
    app.middlewares.append(answer_errors)
