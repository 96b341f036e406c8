"""The token endpoint: authorization code exchange and refresh-token rotation.

Public clients identify themselves with `client_id` alone (PKCE proves the code's owner,
rotation protects refresh tokens). Every answer is JSON with `Cache-Control: no-store`.
Access tokens live at most 5 minutes and never outlive the approval; refresh never extends
the approval. Errors follow RFC 6749 §5.2 (`invalid_target` from RFC 8707).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiMapping

from service.app_keys import CONFIG, DB_POOL, METRICS, TOKENS
from service.audit import oauth_events as audit
from service.auth.approvals import IssuedTokens, rotate_refresh_token
from service.auth.oauth.authorization_requests import same_resource
from service.auth.oauth.client_authentication import authenticated_client
from service.auth.oauth.codes import redeem_code
from service.auth.oauth.responses import (
    error_response,
    json_response,
    read_form,
    single,
)
from service.errors import GrantRefused, OAuthError, ScopeRefused


def _required(params: MultiMapping[Any], name: str) -> str:
    value = single(params, name)
    if not value:
        raise OAuthError("invalid_request", f"the {name} parameter is required")
    return value


def _asked_scopes(params: MultiMapping[Any]) -> frozenset[str] | None:
    """RFC 6749 §6: a refresh may ask for the same scopes or fewer; the access token then
    carries only those. An absent or blank `scope` asks for the approval's scopes."""
    asked = single(params, "scope")
    return frozenset(asked.split()) if asked and not asked.isspace() else None


def _answer(issued: IssuedTokens) -> web.Response:
    return json_response(
        {
            "access_token": issued.access_token,
            "token_type": "Bearer",
            "expires_in": issued.expires_in,
            "refresh_token": issued.refresh_token,
            "scope": issued.scope,
        }
    )


def _failure_reason(err: OAuthError) -> str:
    text = err.description
    if "already used" in text or "revoked" in text or "replaced" in text:
        return "revoked"
    if "expired" in text:
        return "approval_expired"
    return "other"


async def token(request: web.Request) -> web.Response:
    """POST /token."""
    app = request.app
    try:
        params = await read_form(request, "token request")
        grant_type = _required(params, "grant_type")
        if grant_type not in ("authorization_code", "refresh_token"):
            raise OAuthError(
                "unsupported_grant_type", "grant_type must be authorization_code or refresh_token"
            )
        async with app[DB_POOL].acquire() as conn:
            # Operator clients (from `elova-mcp approve`) may refresh: they registered only
            # that grant, so the grant_types check below keeps them out of code exchange.
            client = await authenticated_client(
                request, params, conn, operator=grant_type == "refresh_token"
            )
            client_id = client.client_id
            if grant_type not in client.grant_types:
                raise OAuthError("unauthorized_client", f"the client did not register {grant_type}")
            resource = single(params, "resource")
            if resource is not None and not same_resource(resource, app[CONFIG].mcp_resource):
                raise OAuthError(
                    "invalid_target",
                    f"this server issues tokens only for {app[CONFIG].mcp_resource}",
                )
            if grant_type == "authorization_code":
                try:
                    issued = await redeem_code(
                        conn,
                        app[TOKENS],
                        code=_required(params, "code"),
                        client_id=client_id,
                        redirect_uri=single(params, "redirect_uri"),
                        verifier=_required(params, "code_verifier"),
                        resource=resource,
                        our_resource=app[CONFIG].mcp_resource,
                    )
                except OAuthError as err:
                    await audit.code_refused(request, client_id, err)
                    raise
            else:
                refresh = _required(params, "refresh_token")
                try:
                    issued = await rotate_refresh_token(
                        conn,
                        app[TOKENS],
                        refresh,
                        client_id=client_id,
                        scopes=_asked_scopes(params),
                    )
                except (GrantRefused, ScopeRefused) as err:
                    await audit.refresh_refused(request, client_id, err)
                    raise OAuthError(err.error, err.message) from None
    except OAuthError as err:
        if err.error in ("invalid_grant", "invalid_client", "invalid_target"):
            app[METRICS].auth_failed(_failure_reason(err))
        return error_response(err)
    app[METRICS].token_issued(grant_type)
    await audit.tokens_issued(request, grant_type, client_id, issued.approval_id,
                              issued.account_id, issued.scope)  # fmt: skip
    return _answer(issued)
