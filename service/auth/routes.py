"""The authorization server of an app: its pages' templates, the metadata-document client
cache, the sweep of unused clients, and every authorization-server route with its CORS."""

from __future__ import annotations

from aiohttp import web

from service.auth.clients.lookup import metadata_clients_ctx
from service.auth.clients.retention import client_retention_ctx
from service.auth.enterprise.grant import jwks_cache_ctx
from service.auth.oauth import metadata, registration, revocation, token
from service.auth.oauth.cors import add_cors_routes, with_cors
from service.auth.pages import approvals_list, authorize, consent, signin
from service.auth.pages.rendering import setup_pages
from service.edge.paths import (
    APPROVALS_PATH,
    APPROVALS_REVOKE_PATH,
    AUTHORIZE_PATH,
    OAUTH_METADATA_PATH,
    REGISTER_PATH,
    REVOKE_PATH,
    SIGNIN_PATH,
    SIGNOUT_PATH,
    TOKEN_PATH,
)


def setup_oauth(app: web.Application) -> None:
    """Templates, the metadata-document client cache and every authorization-server route."""
    setup_pages(app)
    app.cleanup_ctx.append(metadata_clients_ctx)
    app.cleanup_ctx.append(jwks_cache_ctx)
    app.cleanup_ctx.append(client_retention_ctx)
    r = app.router
    r.add_get(OAUTH_METADATA_PATH, metadata.serve_metadata)
    r.add_post(REGISTER_PATH, with_cors(registration.register))
    r.add_get(AUTHORIZE_PATH, authorize.authorize)
    r.add_post(AUTHORIZE_PATH, consent.decide)
    r.add_post(TOKEN_PATH, with_cors(token.token))
    r.add_post(REVOKE_PATH, with_cors(revocation.revoke))
    add_cors_routes(
        app,
        {
            OAUTH_METADATA_PATH: "GET, OPTIONS",
            REGISTER_PATH: "POST, OPTIONS",
            TOKEN_PATH: "POST, OPTIONS",
            REVOKE_PATH: "POST, OPTIONS",
        },
    )
    r.add_get(SIGNIN_PATH, signin.signin_page)
    r.add_post(SIGNIN_PATH, signin.signin)
    r.add_get(SIGNOUT_PATH, signin.signout_page)
    r.add_post(SIGNOUT_PATH, signin.signout)
    r.add_get(APPROVALS_PATH, approvals_list.approvals_page)
    r.add_get(APPROVALS_REVOKE_PATH, approvals_list.confirm_revoke)
    r.add_post(APPROVALS_REVOKE_PATH, approvals_list.revoke)
