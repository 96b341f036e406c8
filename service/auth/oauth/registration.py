"""Dynamic client registration (RFC 7591): POST /register, public and confidential clients.

`register` checks in order: the document's size, its parse and every field's rule (400),
then the per-address limit (service/limits/registrations.py: 429 with Retry-After; only a
registration that would be stored takes from it), then the row. Every refusal is counted by
reason (`Metrics.registration_refused`). Which fields are kept and their bounds:
metadata_fields.py. What a client gets and why: docs/decisions/oauth.md, "Registration (RFC
7591)" and "Registration bounds".
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

import msgspec
from aiohttp import hdrs, web

from service.app_keys import AUDIT, DB_POOL, METRICS, REGISTRATION_LIMIT
from service.audit.oauth_events import client_registered
from service.auth.clients.metadata_fields import (
    INFORMATION,
    MAX_DOCUMENT_BYTES,
    ClientName,
    Entries,
    InfoURL,
    Method,
    RedirectURIs,
    Scope,
    SoftwareId,
    SoftwareVersion,
    field_of,
    information_problem,
    nesting_problem,
    size_refusal,
)
from service.auth.clients.names import DEFAULT_CLIENT_NAME, clean_client_name, registered_scope
from service.auth.clients.registry import redirect_uri_refusal
from service.auth.oauth.metadata import AUTH_METHODS, JWT_BEARER
from service.auth.oauth.responses import error_response, json_response
from service.edge.client_address import client_address
from service.errors import RegistrationRefused

GRANT_TYPES = ("authorization_code", "refresh_token")
APPLICATION_TYPES = ("web", "native")


class RegistrationRequest(msgspec.Struct, omit_defaults=True):
    """The fields we read, each within its bound; anything else in the request is ignored."""

    redirect_uris: RedirectURIs | None = None
    token_endpoint_auth_method: Method = "none"
    grant_types: Entries = msgspec.field(default_factory=lambda: ["authorization_code"])
    response_types: Entries = msgspec.field(default_factory=lambda: ["code"])
    client_name: ClientName | None = None
    scope: Scope | None = None
    application_type: Method | None = None
    client_uri: InfoURL | None = None
    logo_uri: InfoURL | None = None
    tos_uri: InfoURL | None = None
    policy_uri: InfoURL | None = None
    software_id: SoftwareId | None = None
    software_version: SoftwareVersion | None = None


_decoder = msgspec.json.Decoder(RegistrationRequest)


def _bad(description: str, reason: str = "metadata") -> RegistrationRefused:
    return RegistrationRefused(reason, "invalid_client_metadata", description)


def _check_redirect_uris(uris: list[str] | None) -> list[str]:
    if not uris:
        raise RegistrationRefused(
            "redirect_uri", "invalid_redirect_uri", "redirect_uris must list at least one URI"
        )
    for uri in uris:
        refusal = redirect_uri_refusal(uri)
        if refusal is not None:
            raise RegistrationRefused(refusal[0], "invalid_redirect_uri", refusal[1])
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
    unsupported = sorted(set(req.grant_types) - {*GRANT_TYPES, JWT_BEARER})
    if unsupported or "authorization_code" not in req.grant_types:
        raise _bad(
            "grant_types must include authorization_code and may add refresh_token"
            f" and {JWT_BEARER} only"
        )
    if req.response_types != ["code"]:
        raise _bad('response_types must be ["code"]')
    try:
        scope = registered_scope(req.scope)
    except ValueError as err:
        raise _bad(str(err)) from None
    return uris, clean_client_name(req.client_name) or DEFAULT_CLIENT_NAME, scope


def hash_client_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8")).digest()


async def _document(request: web.Request) -> RegistrationRequest:
    """The registration document, decoded within its bounds; RegistrationRefused if not.
    A document over its bound but within the request bound (32 KiB) is decoded first, so
    the refusal can name a field over its own bound."""
    if request.content_type != "application/json":
        raise _bad("send the client metadata as application/json")
    too_big = _bad(f"the registration document is at most {MAX_DOCUMENT_BYTES} bytes", "size")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise too_big from None
    if (deep := nesting_problem(body)) is not None:
        raise _bad(deep)
    try:
        document = _decoder.decode(body)
    except msgspec.ValidationError as err:
        message = str(err)
        named = field_of(message)
        if size_refusal(message):
            uris = named == "redirect_uris"
            error = "invalid_redirect_uri" if uris else "invalid_client_metadata"
            raise RegistrationRefused(
                "size", error, f"{named or 'a field'} is over its bound: {message}"
            ) from None
        raise _bad(f"malformed client metadata: {message}") from None
    except msgspec.DecodeError:
        raise _bad("the request body is not a JSON object") from None
    except RecursionError:  # nesting_problem's bound is the parser's too: never a 500
        raise _bad("the client metadata is nested too deeply") from None
    if len(body) > MAX_DOCUMENT_BYTES:  # every field within its bound, the whole is not
        raise too_big
    return document


def _kept(req: RegistrationRequest) -> dict[str, Any]:
    kept: dict[str, Any] = {k: getattr(req, k) for k in INFORMATION if getattr(req, k) is not None}
    problem = information_problem(kept)
    if problem is not None:
        raise _bad(problem)
    if req.application_type is not None:
        kept["application_type"] = req.application_type
    return kept


async def register(request: web.Request) -> web.Response:
    """POST /register: 201 with the client's information, 400 with an RFC 7591 error, or
    429 when this address registered too many clients lately."""
    metrics = request.app[METRICS]
    try:
        req = await _document(request)
        uris, name, scope = _check(req)
        kept = _kept(req)
        wait = await request.app[REGISTRATION_LIMIT].take(client_address(request))
        if wait is not None:
            refused = RegistrationRefused(
                "rate",
                "temporarily_unavailable",
                f"too many clients registered from this address; try again in {wait} seconds",
                status=429,
            )
            refused.headers[hdrs.RETRY_AFTER] = str(wait)
            raise refused
    except RegistrationRefused as err:
        metrics.registration_refused(err.reason)
        return error_response(err)
    client_id = "dyn_" + secrets.token_urlsafe(18)
    issued_at = int(time.time())
    method = req.token_endpoint_auth_method
    secret = secrets.token_urlsafe(32) if method != "none" else None
    # The ID-JAG grant only for a client that asks for it (the answer of the others is as
    # it always was).
    grants = [*GRANT_TYPES, JWT_BEARER] if JWT_BEARER in req.grant_types else list(GRANT_TYPES)
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
        grants,
        scope,
        msgspec.json.encode(kept).decode(),
    )
    await client_registered(request.app.get(AUDIT), request, client_id, "dynamic")
    body: dict[str, Any] = {
        "client_id": client_id,
        "client_id_issued_at": issued_at,
        "client_name": name,
        "redirect_uris": uris,
        "token_endpoint_auth_method": method,
        "grant_types": grants,
        "response_types": ["code"],
        **kept,
    }
    if secret is not None:
        body["client_secret"] = secret
        body["client_secret_expires_at"] = 0
    if scope is not None:
        body["scope"] = scope
    return json_response(body, status=201)
