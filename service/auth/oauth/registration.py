"""Dynamic client registration (RFC 7591) for public clients only.

Clients authenticate with nothing (`token_endpoint_auth_method: none`) and prove possession
with PKCE instead. Redirect URIs follow `clients.redirect_uri_problem`. Unknown metadata
fields are ignored (RFC 7591 §2); the ones we keep are echoed back. `refresh_token` is
always added to the grant types: every client here rotates refresh tokens.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from service.auth.caller import ALL_SCOPES
from service.auth.oauth.clients import redirect_uri_problem
from service.auth.oauth.responses import OAuthError, error_response, json_response
from service.keys import DB_POOL

MAX_REDIRECT_URIS = 10
MAX_NAME_LENGTH = 200
DEFAULT_CLIENT_NAME = "Unnamed application"
GRANT_TYPES = ("authorization_code", "refresh_token")
_CONTROL = {c: "\ufffd" for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}
# Optional RFC 7591 / OIDC fields kept as sent (strings only) and returned in the response.
_KEPT = ("client_uri", "logo_uri", "tos_uri", "policy_uri", "software_id", "software_version")


class RegistrationRequest(msgspec.Struct, omit_defaults=True):
    """The fields we read; anything else in the request is ignored."""

    redirect_uris: list[str] | None = None
    token_endpoint_auth_method: str = "none"
    grant_types: list[str] = msgspec.field(default_factory=lambda: ["authorization_code"])
    response_types: list[str] = msgspec.field(default_factory=lambda: ["code"])
    client_name: str | None = None
    scope: str | None = None
    application_type: str | None = None
    client_uri: str | None = None
    logo_uri: str | None = None
    tos_uri: str | None = None
    policy_uri: str | None = None
    software_id: str | None = None
    software_version: str | None = None


_decoder = msgspec.json.Decoder(RegistrationRequest)


def _bad(description: str) -> OAuthError:
    return OAuthError("invalid_client_metadata", description)


def _check_redirect_uris(uris: list[str] | None) -> list[str]:
    if not uris:
        raise OAuthError("invalid_redirect_uri", "redirect_uris must list at least one URI")
    if len(uris) > MAX_REDIRECT_URIS:
        raise OAuthError(
            "invalid_redirect_uri", f"register at most {MAX_REDIRECT_URIS} redirect URIs"
        )
    for uri in uris:
        problem = redirect_uri_problem(uri)
        if problem is not None:
            raise OAuthError("invalid_redirect_uri", problem)
    return list(dict.fromkeys(uris))


def _check_scope(scope: str | None) -> str | None:
    if scope is None or not scope.strip():
        return None
    unknown = sorted(set(scope.split()) - set(ALL_SCOPES))
    if unknown:
        raise _bad(f"unknown scope {' '.join(unknown)}; supported: {' '.join(ALL_SCOPES)}")
    return " ".join(s for s in ALL_SCOPES if s in scope.split())


def _check(req: RegistrationRequest) -> tuple[list[str], str, str | None]:
    uris = _check_redirect_uris(req.redirect_uris)
    if req.token_endpoint_auth_method != "none":
        raise _bad(
            "only public clients can register: token_endpoint_auth_method must be none"
            f", not {req.token_endpoint_auth_method!r}"
        )
    unsupported = sorted(set(req.grant_types) - set(GRANT_TYPES))
    if unsupported or "authorization_code" not in req.grant_types:
        raise _bad("grant_types must include authorization_code and may add refresh_token only")
    if req.response_types != ["code"]:
        raise _bad('response_types must be ["code"]')
    name = (req.client_name or "").translate(_CONTROL).strip()[:MAX_NAME_LENGTH]
    return uris, name or DEFAULT_CLIENT_NAME, _check_scope(req.scope)


async def register(request: web.Request) -> web.Response:
    """POST /register: 201 with the client's information, or 400 with an RFC 7591 error."""
    try:
        if request.content_type != "application/json":
            raise _bad("send the client metadata as application/json")
        try:
            req = _decoder.decode(await request.read())
        except msgspec.ValidationError as err:
            raise _bad(f"malformed client metadata: {err}") from None
        except msgspec.DecodeError:
            raise _bad("the request body is not a JSON object") from None
        except RecursionError:
            # Deep nesting (within the 32 KiB body) must be a 400, not a 500.
            raise _bad("the client metadata is nested too deeply") from None
        uris, name, scope = _check(req)
    except OAuthError as err:
        return error_response(err)
    kept: dict[str, Any] = {k: getattr(req, k) for k in _KEPT if getattr(req, k) is not None}
    if req.application_type is not None:
        kept["application_type"] = req.application_type
    client_id = "dyn_" + secrets.token_urlsafe(18)
    issued_at = int(time.time())
    await request.app[DB_POOL].execute(
        "INSERT INTO oauth_clients (client_id, client_name, redirect_uris, kind,"
        " token_endpoint_auth_method, grant_types, response_types, scope, metadata)"
        " VALUES ($1, $2, $3, 'dynamic', 'none', $4, '{code}', $5, $6::jsonb)",
        client_id,
        name,
        uris,
        list(GRANT_TYPES),
        scope,
        msgspec.json.encode(kept).decode(),
    )
    body: dict[str, Any] = {
        "client_id": client_id,
        "client_id_issued_at": issued_at,
        "client_name": name,
        "redirect_uris": uris,
        "token_endpoint_auth_method": "none",
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        **kept,
    }
    if scope is not None:
        body["scope"] = scope
    return json_response(body, status=201)
