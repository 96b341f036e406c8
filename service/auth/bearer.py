"""The bearer check of every MCP request: which approval's token is calling.

`verify` reads the `Authorization: Bearer` header and verifies the access token; the caller
it returns is pending (service/auth/authorization.py confirms it against its approval in
the same request, so revocation, expiry, a re-approval and a lost membership take effect on
the next call). `challenge` builds the `WWW-Authenticate` value of a 401 or 403.
"""

from __future__ import annotations

import re

from aiohttp import hdrs, web

from service.app_keys import TOKENS
from service.auth.caller import ALL_SCOPES, Caller
from service.auth.tokens import AccessClaims, TokenService
from service.config import Config
from service.edge.paths import MCP_RESOURCE_METADATA_PATH
from service.errors import AuthError, InsufficientScope, InvalidToken

# RFC 6750 b64token (1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="); anything
# else in the credentials is malformed. Checked with a byte table, not a regular expression:
# every call pays it, and the regex's per-character step cost more than the rest of the
# bearer check of a remembered token.
_TOKEN_CHARACTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/"
# error_description may hold only these characters (RFC 6750 §3).
_UNSAFE_DESCRIPTION = re.compile(r"[^\x20\x21\x23-\x5b\x5d-\x7e]")
_QUERY_TOKEN_PARAM = "access_token"


def _fail(description: str, reason: str, *, error: str = "invalid_token") -> InvalidToken:
    return InvalidToken(description, reason=reason, error=error)


def bearer_token(request: web.Request) -> str:
    """The token of the request's single `Authorization: Bearer` header."""
    # `request.query` parses the query string: only a request that has one is asked.
    if "?" in request.raw_path and _QUERY_TOKEN_PARAM in request.query:
        raise _fail(
            "Access tokens are accepted only in the Authorization header",
            "malformed",
            error="invalid_request",
        )
    values = request.headers.getall(hdrs.AUTHORIZATION, [])
    if not values:
        raise _fail("Authentication required: send Authorization: Bearer <token>", "missing")
    if len(values) > 1:
        raise _fail("Send one Authorization header", "malformed", error="invalid_request")
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer":
        raise _fail("Use the Bearer authentication scheme", "malformed", error="invalid_request")
    if not is_b64token(token):
        raise _fail("The bearer token is malformed", "malformed")
    return token


def is_b64token(token: str) -> bool:
    """Whether `token` is an RFC 6750 b64token: its characters before any trailing "="
    all of the token alphabet, at least one of them."""
    body = token.rstrip("=")
    return (
        bool(body)
        and body.isascii()
        and not body.encode("ascii").translate(None, _TOKEN_CHARACTERS)
    )


def verified_claims(tokens: TokenService, token: str, now: float | None = None) -> AccessClaims:
    """The token's verified claims, remembered by the token service until it expires."""
    return tokens.verify_remembered(token, now)


def verify(request: web.Request, tokens: TokenService) -> Caller:
    """The pending caller of the request's verified access token, or InvalidToken (401;
    the answering boundary counts it by `auth_reason`). The verdict stays on the request
    for `pending_caller`. `tokens` is the app's token service (the caller holds the app)."""
    try:
        claims = verified_claims(tokens, bearer_token(request))
    except InvalidToken:
        request[_VERDICT] = None
        raise
    caller = request[_VERDICT] = Caller.pending(
        account_id=claims.account_id,
        approval_id=claims.approval_id,
        generation=claims.generation,
        client_id=claims.client_id,
        scopes=claims.scopes,
    )
    return caller


def pending_caller(request: web.Request) -> Caller | None:
    """The pending caller of the request's token, None when it was refused (or there is
    none): the bearer check's verdict (the audit line of a refused call asks who called),
    without verifying or raising again."""
    try:
        return request[_VERDICT]
    except KeyError:  # not checked yet (a request refused before its bearer check)
        pass
    try:
        return verify(request, request.app[TOKENS])
    except AuthError:
        return None


# The bearer check's verdict on this request: its pending caller, or None (refused).
_VERDICT: web.RequestKey[Caller | None] = web.RequestKey("bearer_verdict")


def auth_reason(err: AuthError) -> str:
    """The metrics label of an authorization failure."""
    if isinstance(err, InvalidToken):
        return err.reason
    return "insufficient_scope" if isinstance(err, InsufficientScope) else "other"


def _quoted(value: str) -> str:
    return _UNSAFE_DESCRIPTION.sub("?", value)


def challenge(err: AuthError, cfg: Config) -> str:
    """The `WWW-Authenticate` value for a 401 or 403 answer.

    No credentials at all: no error code (RFC 6750 §3.1), the resource metadata and every
    scope a client can ask for (the MCP authorization specification's scope selection).
    A bad, expired or revoked token: `invalid_token`. Too few scopes: `insufficient_scope`
    naming the scopes the call needs. The values are few (a refusal's text is fixed by its
    cause): each is made once (`_CHALLENGES`, bounded).
    """
    missing = isinstance(err, InvalidToken) and err.reason == "missing"
    scope = err.required_scope if isinstance(err, InsufficientScope) else None
    key = (cfg.public_url, missing, err.error, err.description, scope)
    value = _CHALLENGES.get(key)
    if value is None:
        value = _challenge(cfg.public_url, missing, err.error, err.description, scope)
        if len(_CHALLENGES) < _KNOWN_CHALLENGES:
            _CHALLENGES[key] = value
    return value


_CHALLENGES: dict[tuple[str, bool, str, str, str | None], str] = {}
_KNOWN_CHALLENGES = 1024


def _challenge(
    public_url: str, missing: bool, error: str, description: str, scope: str | None
) -> str:
    parts = [f'resource_metadata="{public_url}{MCP_RESOURCE_METADATA_PATH}"']
    if missing:
        parts.append(f'scope="{" ".join(ALL_SCOPES)}"')
        return "Bearer " + ", ".join(parts)
    parts += [f'error="{error}"', f'error_description="{_quoted(description)}"']
    if scope is not None:
        parts.append(f'scope="{_quoted(scope)}"')
    return "Bearer " + ", ".join(parts)
