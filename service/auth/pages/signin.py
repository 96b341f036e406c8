"""Sign-in and sign-out pages: local accounts, email and password.

The sign-in form is protected against login CSRF by a double-submit cookie (a random value
in a cookie and in the form, which a cross-site page can neither read nor set). After a
sign-in the browser goes back to `next`, which may only be an authorization request or the
approvals page of this server, never another origin. Passwords are checked with scrypt in a
worker thread; an unknown email costs the same work as a wrong password, so timing does not
tell which accounts exist. Failed sign-ins are throttled per (account, address) pair, per
account only when they come from many addresses, and per address (`throttle`); the address
is the client's, read behind a trusted proxy (`client_address`).
"""

from __future__ import annotations

import asyncio
import functools
import secrets
from urllib.parse import parse_qs, urlencode, urlsplit

from aiohttp import hdrs, web

from service.app_keys import CONFIG, DB_POOL, METRICS
from service.audit import oauth_events as audit
from service.auth.clients.names import shown_client_name
from service.auth.clients.registry import load_client
from service.auth.pages import signin_sessions, signin_throttle
from service.auth.pages.rendering import (
    Form,
    error_page,
    read_form,
    render,
    see_other,
    unreadable_form,
)
from service.edge.client_address import client_address
from service.edge.paths import APPROVALS_PATH, AUTHORIZE_PATH, SIGNIN_PATH, SIGNOUT_PATH
from service.observability.logs import annotate
from service.passwords import hash_password, verify_password

_CSRF_COOKIE = "elova_signin"
_CSRF_MAX_AGE = 3600
MAX_EMAIL_LENGTH = 320
MAX_PASSWORD_LENGTH = 1024


@functools.cache
def _decoy_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def safe_next(raw: object) -> str:
    """Where to go after sign-in: an authorization request or the approvals page, else the
    approvals page. Only paths on this server, so it can never be an open redirect."""
    if isinstance(raw, str) and len(raw) <= 8000:
        parts = urlsplit(raw)
        if not parts.scheme and not parts.netloc and "\\" not in raw:
            if parts.path == AUTHORIZE_PATH and parts.query:
                return f"{AUTHORIZE_PATH}?{parts.query}"
            if parts.path == APPROVALS_PATH:
                return APPROVALS_PATH
    return APPROVALS_PATH


def try_again_in(seconds: int) -> str:
    """A wait as the page says it: "40 seconds", "1 minute", "15 minutes" (rounded up)."""
    if seconds < 60:
        return f"{seconds} second{'s' if seconds != 1 else ''}"
    minutes = (seconds + 59) // 60
    return f"{minutes} minute{'s' if minutes != 1 else ''}"


def signin_location(next_path: str) -> str:
    return f"{SIGNIN_PATH}?{urlencode({'next': next_path})}"


async def _client_name(request: web.Request, next_path: str) -> str | None:
    if not next_path.startswith(AUTHORIZE_PATH + "?"):
        return None
    ids = parse_qs(urlsplit(next_path).query).get("client_id", [])
    if len(ids) != 1 or len(ids[0]) > 200:
        return None
    client = await load_client(request.app[DB_POOL], ids[0])
    return shown_client_name(client.client_name) if client else None


async def _form(
    request: web.Request, next_path: str, *, email: str = "", error: str | None = None,
    status: int = 200,
) -> web.Response:  # fmt: skip
    cfg = request.app[CONFIG]
    token = request.cookies.get(signin_sessions.cookie_name(cfg, _CSRF_COOKIE)) or ""
    if len(token) != 43:
        token = secrets.token_urlsafe(32)
    context = {
        "next": next_path,
        "email": email,
        "error": error,
        "csrf": token,
        "client_name": await _client_name(request, next_path),
    }
    response = render(request, "signin.html", context, status=status)
    signin_sessions.set_cookie(response, cfg, _CSRF_COOKIE, token, _CSRF_MAX_AGE)
    return response


async def signin_page(request: web.Request) -> web.Response:
    """GET /signin."""
    return await _form(request, safe_next(request.query.get("next")))


async def signin(request: web.Request) -> web.Response:
    """POST /signin."""
    cfg, pool = request.app[CONFIG], request.app[DB_POOL]
    form = await read_form(request)
    if form is None:
        return unreadable_form(request)
    next_path = safe_next(form.get("next"))
    cookie = request.cookies.get(signin_sessions.cookie_name(cfg, _CSRF_COOKIE))
    if cookie is None or not signin_sessions.csrf_matches(cookie, form.get("csrf")):
        return await _form(
            request, next_path, error="The sign-in form expired. Please try again.", status=403
        )
    email, password = form.get("email"), form.get("password")
    if not isinstance(email, str) or not isinstance(password, str) or not email or not password:
        return await _form(
            request, next_path, email=str(email or "")[:MAX_EMAIL_LENGTH],
            error="Enter your email address and password.", status=400,
        )  # fmt: skip
    email = email.strip()[:MAX_EMAIL_LENGTH]
    address = client_address(request)
    held = await signin_throttle.hold(pool, cfg.signin_throttle, email, address)
    if held.seconds:
        request.app[METRICS].auth_failed("other")
        annotate(request, signin_hold=held.reason)
        await audit.signin_failed(request, None, 429)
        response = await _form(
            request, next_path, email=email, status=429,
            error=f"Too many failed sign-ins. Try again in {try_again_in(held.seconds)}.",
        )  # fmt: skip
        response.headers[hdrs.RETRY_AFTER] = str(held.seconds)
        return response
    row = await pool.fetchrow(
        "SELECT id, password_hash FROM accounts WHERE lower(email) = lower($1)", email
    )
    stored = row["password_hash"] if row is not None else None
    ok = await asyncio.to_thread(
        verify_password, password[:MAX_PASSWORD_LENGTH], stored or _decoy_hash()
    )
    if row is None or stored is None or not ok:
        await signin_throttle.record_failure(pool, cfg.signin_throttle, email, address)
        request.app[METRICS].auth_failed("other")
        await audit.signin_failed(request, row["id"] if row is not None else None, 401)
        return await _form(
            request, next_path, email=email, status=401,
            error="The email address or password is not correct.",
        )  # fmt: skip
    await signin_throttle.record_success(pool, email, address)
    await audit.signed_in(request, row["id"])
    response = see_other(next_path)
    await signin_sessions.start_session(request, response, row["id"])
    return response


async def session_form(
    request: web.Request, page: str
) -> tuple[signin_sessions.SignedIn, Form] | web.Response:
    """The session and form of a POST from a signed-in page, or the answer when the form is
    unreadable, nobody is signed in (to sign-in), or its CSRF token is not the session's
    (`page` says what to reload). For sign-out and the Approvals page; the approval form
    (consent.py) answers these cases itself, showing the authorization request again."""
    session = await signin_sessions.current_session(request)
    form = await read_form(request)
    if form is None:
        return unreadable_form(request)
    if session is None:
        return see_other(signin_location(APPROVALS_PATH))
    if not signin_sessions.csrf_matches(session.csrf_token, form.get("csrf")):
        return error_page(
            request, "This form has expired", f"Reload the {page} and try again.", status=403
        )
    return session, form


async def signout_page(request: web.Request) -> web.Response:
    """GET /signout: the button that signs out (signing out changes state, so it is a POST)."""
    session = await signin_sessions.current_session(request)
    context = {
        "account": session,
        "csrf": session.csrf_token if session else "",
        "signout_action": SIGNOUT_PATH,
        "signin_path": signin_location(APPROVALS_PATH),
        "approvals_path": APPROVALS_PATH,
    }
    return render(request, "signout.html", context)


async def signout(request: web.Request) -> web.Response:
    """POST /signout (CSRF-protected like every form of a session)."""
    got = await session_form(request, "page")
    if isinstance(got, web.Response):
        return got
    session, _ = got
    response = see_other(signin_location(APPROVALS_PATH))
    await signin_sessions.end_session(request, response, session)
    return response
