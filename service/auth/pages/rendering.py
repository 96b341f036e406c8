"""HTML pages of the authorization server: rendering with security headers, error pages,
and the stylesheet.

Every page is rendered with autoescaping (customer-controlled names are text, never
markup), is never cached, cannot be framed, sends no referrer, and carries a strict
Content-Security-Policy: no scripts at all, styles only from our own stylesheet. Chrome
applies `form-action` to every redirect that follows a form POST, so a page whose form ends
in a redirect to the client lists that client's redirect origin there: serialized from the
validated URI (service/auth/clients/registry.py `redirect_origin`) and checked once more here
against the grammar of a CSP source, so no raw input reaches the header.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

import aiohttp_jinja2
from aiohttp import hdrs, web
from multidict import MultiDictProxy

from service.app_keys import OAUTH_STYLESHEET
from service.edge.paths import STYLESHEET_PATH

# What `form-action` may list beside 'self': a serialized origin (scheme://host[:port], host
# in ASCII: a name, a dotted quad or a bracketed IPv6 address) or a bare scheme. A target
# that is not exactly that is left out, so nothing a client wrote can add a directive.
_CSP_SOURCE = re.compile(
    r"(?:https?://(?:[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?\.?|\[[0-9a-f:.]+\])(?::\d{1,5})?"
    r"|[a-z][a-z0-9+.-]*:)"
)


_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


def wants_html(request: web.Request) -> bool:
    """A browser: a request whose Accept header names `text/html` (or XHTML) with a
    non-zero quality; curl's `*/*` and API clients get JSON."""
    for item in request.headers.get("Accept", "").split(","):
        media, _, params = item.partition(";")
        if media.strip().lower() in _HTML_TYPES:
            return _quality(params) > 0
    return False


def _quality(params: str) -> float:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return float(value)
            except ValueError:
                return 0.0
    return 1.0


def content_security_policy(form_targets: Iterable[str | None] = ()) -> str:
    """The pages' policy; `form_targets` are redirect origins (clients.redirect_origin)."""
    valid = [t for t in form_targets if t is not None and _CSP_SOURCE.fullmatch(t)]
    form_action = " ".join(["'self'", *dict.fromkeys(valid)])
    return (
        "default-src 'none'; style-src 'self'; img-src 'self'; "
        f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'"
    )


def security_headers(form_targets: Iterable[str | None] = ()) -> dict[str, str]:
    return {
        "Content-Security-Policy": content_security_policy(form_targets),
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        hdrs.CACHE_CONTROL: "no-store",
        "Pragma": "no-cache",
    }


def render(
    request: web.Request,
    template: str,
    context: dict[str, Any],
    *,
    status: int = 200,
    form_targets: Iterable[str | None] = (),
) -> web.Response:
    response = aiohttp_jinja2.render_template(template, request, context, status=status)
    response.headers.update(security_headers(form_targets))
    return response


NOTHING_SHARED = "Nothing was shared with any application. You can close this tab."


def error_page(
    request: web.Request,
    title: str,
    message: str,
    *,
    status: int = 400,
    note: str = NOTHING_SHARED,
    back: tuple[str, str] | None = None,
) -> web.Response:
    """A refusal shown to the person in the browser (never sent to a client's URI); `back`
    is a (path, text) link onwards."""
    context = {"title": title, "message": message, "note": note, "back": back}
    return render(request, "error.html", context, status=status)


def see_other(location: str, *, form_targets: Iterable[str | None] = ()) -> web.Response:
    """303 after a form POST (or to another page), with the page headers."""
    return web.Response(
        status=303, headers={"Location": location, **security_headers(form_targets)}
    )


async def stylesheet(request: web.Request) -> web.Response:
    return web.Response(
        body=request.app[OAUTH_STYLESHEET],
        content_type="text/css",
        headers={
            hdrs.CACHE_CONTROL: "public, max-age=3600",
            hdrs.X_CONTENT_TYPE_OPTIONS: "nosniff",
        },
    )


def setup_pages(app: web.Application) -> None:
    import jinja2

    aiohttp_jinja2.setup(
        app,
        loader=jinja2.PackageLoader("service.auth.pages", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    folder = resources.files("service.auth.pages") / "templates"
    app[OAUTH_STYLESHEET] = (folder / "elova.css").read_bytes()
    app.router.add_get(STYLESHEET_PATH, stylesheet)


Form = MultiDictProxy[str | bytes | bytearray | web.FileField]


async def read_form(request: web.Request) -> Form | None:
    """The page's urlencoded form, or None when the body is not UTF-8 (answer it with
    `unreadable_form`; aiohttp would raise UnicodeDecodeError: a 500)."""
    try:
        return await request.post()
    except UnicodeDecodeError:
        return None


def unreadable_form(request: web.Request) -> web.Response:
    return error_page(
        request, "The form could not be read", "Go back and send the form again.", status=400
    )
