"""The innermost middleware: the answer of a request made while the database is not
migrated, whose input is not text, whose audit line found no room, or whose handler raised
an HTTP error or failed unexpectedly.

Each answer is its own module's: service/server/schema_gate.py (the 503 naming
`elova-mcp migrate`), service/server/bad_input.py (bytes that are not text, in
the route's error shape), service/audit (the JSON 503 with Retry-After when the audit queue
stays full), service/server/error_pages.py (404/405/413, that 503 and a crash: a page for a
browser, JSON for the rest). Why they share one layer: docs/decisions/scale.md, "Throughput:
what was kept and what was not" (one middleware layer answers what failed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from service.audit.trail import unavailable_answer
from service.errors import AuditUnavailable
from service.server.bad_input import refused_input, refused_text
from service.server.error_pages import crash_page, http_error_answer, unavailable_page
from service.server.schema_gate import refused_unmigrated
from service.store.failures import NOT_TEXT

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def answer_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The innermost layer of the chain (service/app.py), so every route and every other
    middleware is in place. The order, innermost first: bad input, then HTTP errors, then
    the audit 503 (a page for a browser, the OAuth JSON error for the rest, both with
    Retry-After, and no traceback in the log: a sink outage is expected, not a bug), then
    any other exception (a browser's crash page; the rest is left to the request-log
    middleware's JSON 500)."""
    try:
        try:
            refusal = await refused_unmigrated(request) or await refused_input(request)
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
    except AuditUnavailable as err:  # expected under a sink outage: no traceback logged
        return unavailable_page(request, err) or unavailable_answer(err)
    except Exception:
        page = crash_page(request)
        if page is None:
            raise
        return page
