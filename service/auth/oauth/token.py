"""The token endpoint: authorization code exchange, refresh-token rotation, and the JWT
bearer grant of an ID-JAG from a trusted IdP (auth/enterprise/grant.py: no refresh token).

Public clients identify themselves with `client_id` alone (PKCE proves the code's owner,
rotation protects refresh tokens). Every answer is JSON with `Cache-Control: no-store`.
Access tokens live at most 5 minutes and never outlive the approval; refresh never extends
the approval. Errors follow RFC 6749 §5.2 (`invalid_target` from RFC 8707).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from multidict import MultiMapping

from service.app_keys import CONFIG, DB_POOL, IDP_JWKS, METRICS, REDIS, TOKENS
from service.audit import oauth_events as audit
from service.auth.approvals import IssuedTokens, rotate_refresh_token
from service.auth.clients.registry import Client
from service.auth.enterprise.grant import (
    GrantContext,
    IdpGrant,
    jwt_bearer_grant,
    trusted_issuer,
)
from service.auth.oauth.authorization_requests import same_resource
from service.auth.oauth.client_authentication import authenticated_client
from service.auth.oauth.codes import redeem_code
from service.auth.oauth.metadata import JWT_BEARER
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


def _answer(issued: IssuedTokens | IdpGrant) -> web.Response:
    """The tokens; an ID-JAG grant has no refresh token (auth/enterprise/grant.py)."""
    body: dict[str, Any] = {
        "access_token": issued.access_token,
        "token_type": "Bearer",
        "expires_in": issued.expires_in,
    }
    if isinstance(issued, IssuedTokens):
        body["refresh_token"] = issued.refresh_token
    body["scope"] = issued.scope
    return json_response(body)


GRANT_TYPES = ("authorization_code", "refresh_token", JWT_BEARER)


async def _id_jag_grant(
    request: web.Request, conn: Any, client: Client, params: MultiMapping[Any]
) -> web.Response:
    """The JWT bearer grant; each refusal is audited (never with the assertion)."""
    app = request.app
    cfg = app[CONFIG]
    issuer: str | None = None
    try:
        assertion = _required(params, "assertion")
        idp = await trusted_issuer(conn, assertion)
        issuer = idp.issuer
        ctx = GrantContext(
            tokens=app[TOKENS], jwks=app[IDP_JWKS], redis=app.get(REDIS, None),
            key_prefix=cfg.redis_key_prefix, our_issuer=cfg.issuer,
            resource_ok=lambda sent: same_resource(sent, cfg.mcp_resource),
        )  # fmt: skip
        granted = await jwt_bearer_grant(conn, ctx, idp, client, assertion, _asked_scopes(params))
    except OAuthError as err:
        await audit.idp_grant_refused(request, client.client_id, issuer, err)
        raise
    approval = granted.approval
    await audit.idp_granted(request, approval.account_id, approval.id, approval.client_id,
                            approval.workspace_ids, granted.issuer, granted.scope)  # fmt: skip
    return _answer(granted)


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
        if grant_type not in GRANT_TYPES:
            raise OAuthError(
                "unsupported_grant_type",
                f"grant_type must be authorization_code, refresh_token or {JWT_BEARER}",
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
            if grant_type == JWT_BEARER:
                answer = await _id_jag_grant(request, conn, client, params)
                app[METRICS].token_issued("jwt_bearer")
                return answer
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
