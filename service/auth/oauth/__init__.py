"""The OAuth 2.1 authorization server: metadata, registration, sign-in, the approval page,
the approvals page, the token and revocation endpoints. One concern a module:

    metadata.py       RFC 8414 document and the endpoint paths
    registration.py   RFC 7591 dynamic registration (public and confidential clients)
    clients.py        registered clients and the redirect-URI rules (RFC 8252)
    client_auth.py    client authentication at /token and /revoke
    cimd.py           Client ID Metadata Documents: validation, cache, stored client
    client_lookup.py  the client a client_id names at /authorize, /token, /revoke
    cimd_fetch.py     the SSRF-guarded fetch of a metadata document
    outbound_address.py  where that fetch may connect: host forms, public unicast
    names.py          client name and registered scope, cleaned and checked
    hosts.py          redirect hosts: the characters allowed, punycode and script display
    client_metadata.py  the client metadata kept and each field's bound
    registration_limit.py  registrations per client address (Redis token bucket)
    client_retention.py  unused clients deleted after the retention
    cors.py           CORS for /register, /token, /revoke and the metadata documents
    requests.py       the authorization request, validated on every step
    authorize.py      GET /authorize: page errors, redirect errors, sign-in or approval page
    approval.py       the approval page and its POST (grant + code)
    codes.py          authorization codes (single use, PKCE S256)
    token.py          POST /token (code exchange, refresh rotation)
    revocation.py     POST /revoke (RFC 7009)
    signin.py         sign-in / sign-out pages
    error_pages.py    404/405/500: a page for browsers, JSON for the rest (service/error_answers.py)
    signin_sessions.py  server-side sign-in sessions and CSRF tokens
    throttle.py       failed sign-in throttle in PostgreSQL
    approvals_page.py /approvals: list with activity, confirm and revoke
    pages.py          rendering, security headers, CSP, the stylesheet
    responses.py      OAuth JSON answers: errors (OAuthError, service/errors.py) and successes
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
from service.auth.oauth.client_lookup import metadata_clients_ctx
from service.auth.oauth.client_retention import client_retention_ctx
from service.auth.oauth.cors import add_cors_routes, with_cors
from service.auth.oauth.pages import setup_pages
from service.auth.oauth.registration_limit import registration_limit_ctx


def setup_oauth(app: web.Application) -> None:
    """Templates, the metadata-document client cache and every authorization-server route."""
    setup_pages(app)
    app.cleanup_ctx.append(metadata_clients_ctx)
    app.cleanup_ctx.append(registration_limit_ctx)
    app.cleanup_ctx.append(client_retention_ctx)
    r = app.router
    r.add_get(metadata.PATH, metadata.serve_metadata)
    r.add_post(metadata.REGISTER_PATH, with_cors(registration.register))
    r.add_get(metadata.AUTHORIZE_PATH, authorize.authorize)
    r.add_post(metadata.AUTHORIZE_PATH, approval.decide)
    r.add_post(metadata.TOKEN_PATH, with_cors(token.token))
    r.add_post(metadata.REVOKE_PATH, with_cors(revocation.revoke))
    add_cors_routes(
        app,
        {
            metadata.PATH: "GET, OPTIONS",
            metadata.REGISTER_PATH: "POST, OPTIONS",
            metadata.TOKEN_PATH: "POST, OPTIONS",
            metadata.REVOKE_PATH: "POST, OPTIONS",
        },
    )
    r.add_get(metadata.SIGNIN_PATH, signin.signin_page)
    r.add_post(metadata.SIGNIN_PATH, signin.signin)
    r.add_get(metadata.SIGNOUT_PATH, signin.signout_page)
    r.add_post(metadata.SIGNOUT_PATH, signin.signout)
    r.add_get(metadata.APPROVALS_PATH, approvals_page.approvals_page)
    r.add_get(approvals_page.REVOKE_PATH, approvals_page.confirm_revoke)
    r.add_post(approvals_page.REVOKE_PATH, approvals_page.revoke)
