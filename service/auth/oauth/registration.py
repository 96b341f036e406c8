"""Dynamic client registration (RFC 7591).

Public clients authenticate with nothing (`token_endpoint_auth_method: none`) and prove
possession with PKCE. A client that asks for `client_secret_post` or `client_secret_basic`
becomes a confidential client: it gets a random `client_secret` (never expiring; only its
SHA-256 is stored) that `/token` and `/revoke` check, and PKCE is still required. Redirect
URIs follow `clients.redirect_uri_problem`; `application_type` (`web` or `native`) is kept
and echoed. Unknown metadata fields are ignored (RFC 7591 §2); the ones we keep are echoed
back. `refresh_token` is always added to the grant types: every client rotates refresh
tokens. The answer echoes `grant_types`, `response_types` and `token_endpoint_auth_method`
as stored.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import msgspec
from aiohttp import web

from service.auth.oauth.clients import redirect_uri_problem
from service.auth.oauth.metadata import AUTH_METHODS
from service.auth.oauth.names import clean_client_name, registered_scope
from service.auth.oauth.responses import error_response, json_response
from service.errors import OAuthError
from service.keys import DB_POOL

MAX_REDIRECT_URIS = 10
DEFAULT_CLIENT_NAME = "Unnamed application"
GRANT_TYPES = ("authorization_code", "refresh_token")
APPLICATION_TYPES = ("web", "native")
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


def _check(req: RegistrationRequest) -> tuple[list[str], str, str | None]:
    uris = _check_redirect_uris(req.redirect_uris)
    if req.token_endpoint_auth_method not in AUTH_METHODS:
        raise _bad(
            "token_endpoint_auth_method must be one of " + ", ".join(AUTH_METHODS)
            + f", not {req.token_endpoint_auth_method!r}"
        )  # fmt: skip
    if req.application_type is not None and req.application_type not in APPLICATION_TYPES:
        raise _bad(f"application_type must be web or native, not {req.application_type!r}")
    unsupported = sorted(set(req.grant_types) - set(GRANT_TYPES))
    if unsupported or "authorization_code" not in req.grant_types:
        raise _bad("grant_types must include authorization_code and may add refresh_token only")
    if req.response_types != ["code"]:
        raise _bad('response_types must be ["code"]')
    try:
        scope = registered_scope(req.scope)
    except ValueError as err:
        raise _bad(str(err)) from None
    return uris, clean_client_name(req.client_name) or DEFAULT_CLIENT_NAME, scope


def hash_client_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


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
    method = req.token_endpoint_auth_method
    secret = secrets.token_urlsafe(32) if method != "none" else None
    await request.app[DB_POOL].execute(
        "INSERT INTO oauth_clients (client_id, client_name, redirect_uris, kind,"
        " token_endpoint_auth_method, client_secret_hash, grant_types, response_types,"
        " scope, metadata)"
        " VALUES ($1, $2, $3, 'dynamic', $4, $5, $6, '{code}', $7, $8::jsonb)",
        client_id,
        name,
        uris,
        method,
        hash_client_secret(secret) if secret is not None else None,
        list(GRANT_TYPES),
        scope,
        msgspec.json.encode(kept).decode(),
    )
    body: dict[str, Any] = {
        "client_id": client_id,
        "client_id_issued_at": issued_at,
        "client_name": name,
        "redirect_uris": uris,
        "token_endpoint_auth_method": method,
        "grant_types": list(GRANT_TYPES),
        "response_types": ["code"],
        **kept,
    }
    if secret is not None:
        body["client_secret"] = secret
        body["client_secret_expires_at"] = 0
    if scope is not None:
        body["scope"] = scope
    return json_response(body, status=201)
