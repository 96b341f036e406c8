"""The OAuth 2.1 authorization server: metadata, registration, sign-in, the approval page,
the approvals page, the token and revocation endpoints. One concern a module:

    metadata.py       RFC 8414 document and the endpoint paths
    registration.py   RFC 7591 dynamic registration (public clients)
    clients.py        registered clients and the redirect-URI rule
    requests.py       the authorization request, validated on every step
    authorize.py      GET /authorize: page errors, redirect errors, sign-in or approval page
    approval.py       the approval page and its POST (grant + code)
    codes.py          authorization codes (single use, PKCE S256)
    token.py          POST /token (code exchange, refresh rotation)
    revocation.py     POST /revoke (RFC 7009)
    signin.py         sign-in / sign-out pages
    error_pages.py    404/405/500: a page for browsers, JSON for the rest (a middleware)
    sessions.py       server-side sign-in sessions and CSRF tokens
    throttle.py       failed sign-in throttle in PostgreSQL
    approvals_page.py /approvals: list with activity, confirm and revoke
    pages.py          rendering, security headers, CSP, the stylesheet
    responses.py      OAuth JSON errors
"""

from __future__ import annotations

from aiohttp import web

from service.auth.oauth import (
    approval,
    approvals_page,
    authorize,
    metadata,
    registration,
    revocation,
    signin,
    token,
)
from service.auth.oauth.error_pages import error_pages
from service.auth.oauth.pages import setup_pages


def setup_oauth(app: web.Application) -> None:
    """Templates and every authorization-server route."""
    setup_pages(app)
    app.middlewares.append(error_pages)
    r = app.router
    r.add_get(metadata.PATH, metadata.serve_metadata)
    r.add_post(metadata.REGISTER_PATH, registration.register)
    r.add_get(metadata.AUTHORIZE_PATH, authorize.authorize)
    r.add_post(metadata.AUTHORIZE_PATH, approval.decide)
    r.add_post(metadata.TOKEN_PATH, token.token)
    r.add_post(metadata.REVOKE_PATH, revocation.revoke)
    r.add_get(metadata.SIGNIN_PATH, signin.signin_page)
    r.add_post(metadata.SIGNIN_PATH, signin.signin)
    r.add_get(metadata.SIGNOUT_PATH, signin.signout_page)
    r.add_post(metadata.SIGNOUT_PATH, signin.signout)
    r.add_get(metadata.APPROVALS_PATH, approvals_page.approvals_page)
    r.add_get(approvals_page.REVOKE_PATH, approvals_page.confirm_revoke)
    r.add_post(approvals_page.REVOKE_PATH, approvals_page.revoke)
