"""The authorization request (`/authorize` parameters), validated the same way on every step.

The request travels through sign-in and the approval form as its own parameters
(`hidden_fields`) and is re-validated each time, so nothing about a pending request is
stored. Until the client and an exactly registered redirect URI are known, errors are shown
on a page (`PageRefusal`); after that they go back to the redirect URI (`RedirectRefusal`)
with `state` and `iss` (RFC 6749 §4.1.2.1). A URL client id is resolved through its metadata
document (service/auth/clients/lookup.py). Which error goes where: docs/decisions/oauth.md,
"The authorization request".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import asyncpg
from aiohttp import web
from multidict import MultiMapping

from service.app_keys import CONFIG, DB_POOL
from service.auth.caller import ALL_SCOPES
from service.auth.clients.lookup import authorizing_client
from service.auth.clients.registry import Client, ascii_uri, matches_registered
from service.auth.oauth.responses import single
from service.errors import FetchRefused, OAuthError, PageRefusal, RedirectRefusal

# An S256 challenge is the base64url SHA-256 of the verifier: exactly 43 characters.
_CHALLENGE = re.compile(r"[A-Za-z0-9_-]{43}")
MAX_STATE_LENGTH = 1000
OAUTH_PARAMS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "state",
    "code_challenge",
    "code_challenge_method",
    "scope",
    "resource",
)


@dataclass(frozen=True, slots=True)
class AuthorizationRequest:
    client: Client
    redirect_uri: str
    state: str | None
    code_challenge: str
    scopes: tuple[str, ...]
    resource: str

    def hidden_fields(self) -> list[tuple[str, str]]:
        """The parameters that re-create this request when the approval form is posted."""
        fields = [
            ("response_type", "code"),
            ("client_id", self.client.client_id),
            ("redirect_uri", self.redirect_uri),
            ("code_challenge", self.code_challenge),
            ("code_challenge_method", "S256"),
            ("scope", " ".join(self.scopes)),
            ("resource", self.resource),
        ]
        if self.state is not None:
            fields.append(("state", self.state))
        return fields

    def query(self) -> str:
        return urlencode(self.hidden_fields())


def refusal_location(refusal: RedirectRefusal, issuer: str) -> str:
    """Where a redirect refusal sends the browser: its OAuth error on the redirect URI."""
    params = {"error": refusal.error, "error_description": refusal.description}
    return redirect_to(refusal.redirect_uri, params, refusal.state, issuer)


def redirect_to(redirect_uri: str, params: dict[str, str], state: str | None, issuer: str) -> str:
    """The redirect URI (in ASCII: clients.ascii_uri) with the response parameters, `state`
    and `iss` (RFC 9207) added."""
    answer = dict(params)
    if state is not None:
        answer["state"] = state
    answer["iss"] = issuer
    target = ascii_uri(redirect_uri)
    separator = "&" if "?" in target else "?"
    return target + separator + urlencode(answer)


def same_resource(sent: str, resource: str) -> bool:
    """RFC 8707 resource match: scheme and host compared without case, one trailing slash
    ignored (the MCP specification asks servers to accept both), the rest exactly."""
    try:
        parts = urlsplit(sent)
    except ValueError:
        return False
    if parts.fragment or parts.query:
        return False
    normal = f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"
    return normal == resource.rstrip("/")


async def _client_and_redirect(
    app: web.Application, conn: asyncpg.Connection | asyncpg.Pool, params: MultiMapping[Any]
) -> tuple[Client, str]:
    try:
        client_id = single(params, "client_id")
        redirect_uri = single(params, "redirect_uri")
    except OAuthError as err:
        raise PageRefusal("This sign-in link is malformed", err.description) from None
    if not client_id:
        raise PageRefusal("This sign-in link is incomplete", "The link names no application.")
    try:
        client = await authorizing_client(app, conn, client_id)
    except FetchRefused as err:
        raise PageRefusal(
            "This application could not be verified",
            f"Elova could not use the application's metadata document: {err}. "
            "Go back to the application and tell its developers.",
        ) from None
    if client is None:
        raise PageRefusal(
            "Unknown application",
            "The application that sent you here is not registered with Elova. "
            "Go back to it and connect again.",
        )
    if redirect_uri is None:
        if len(client.redirect_uris) != 1:
            raise PageRefusal(
                "This sign-in link is incomplete",
                "The link does not say where to return after approval.",
            )
        redirect_uri = client.redirect_uris[0]
    if not matches_registered(redirect_uri, client.redirect_uris):
        raise PageRefusal(
            "This link does not match the application",
            "The address to return to after approval is not one the application registered, "
            "so Elova will not send you there.",
        )
    return client, redirect_uri


def _scopes(raw: str | None, client: Client) -> tuple[str, ...]:
    requested = (raw or client.scope or " ".join(ALL_SCOPES)).split()
    unknown = sorted(set(requested) - set(ALL_SCOPES))
    if unknown:
        raise OAuthError(
            "invalid_scope", f"unknown scope {' '.join(unknown)}; supported: {' '.join(ALL_SCOPES)}"
        )
    if not requested:
        raise OAuthError("invalid_scope", "request at least one scope")
    return tuple(s for s in ALL_SCOPES if s in requested)


async def parse_authorization_request(
    app: web.Application, params: MultiMapping[Any]
) -> AuthorizationRequest:
    """Validate `/authorize` parameters; raise PageRefusal or RedirectRefusal. A metadata
    document that cannot be fetched or is not acceptable is a page refusal naming why. The
    redirect URI is the one the request sent (for a loopback URI its port may differ from
    the registered one)."""
    resource = app[CONFIG].mcp_resource
    client, redirect_uri = await _client_and_redirect(app, app[DB_POOL], params)
    try:
        state = single(params, "state")
    except OAuthError:
        raise RedirectRefusal(
            redirect_uri, None, "invalid_request", "the state parameter was sent more than once"
        ) from None
    try:
        if state is not None and len(state) > MAX_STATE_LENGTH:
            raise OAuthError("invalid_request", f"state is at most {MAX_STATE_LENGTH} characters")
        response_type = single(params, "response_type")
        if response_type != "code":
            raise OAuthError(
                "unsupported_response_type", "only the authorization code flow (code) is supported"
            )
        challenge = single(params, "code_challenge")
        method = single(params, "code_challenge_method")
        if not challenge:
            raise OAuthError("invalid_request", "PKCE is required: send code_challenge (S256)")
        if method != "S256":
            raise OAuthError("invalid_request", "code_challenge_method must be S256")
        if not _CHALLENGE.fullmatch(challenge):
            raise OAuthError("invalid_request", "code_challenge is not an S256 challenge")
        scopes = _scopes(single(params, "scope"), client)
        asked = params.getall("resource", [])
        if not asked:
            raise OAuthError("invalid_target", f"send resource={resource} (RFC 8707)")
        if len(asked) != 1 or not same_resource(asked[0], resource):
            raise OAuthError("invalid_target", f"this server issues tokens only for {resource}")
    except OAuthError as err:
        raise RedirectRefusal(redirect_uri, state, err.error, err.description) from None
    return AuthorizationRequest(client, redirect_uri, state, challenge, scopes, resource)
