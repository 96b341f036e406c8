"""Who is calling `/token` and `/revoke`: client authentication (RFC 6749 §2.3).

A public client names itself with the `client_id` form parameter. A confidential client
(registered with `client_secret_post` or `client_secret_basic`) must also prove its secret,
either as `client_secret` in the form or in `Authorization: Basic` (URL-encoded id and
secret); either way is accepted whichever it registered. Every failure is 401
`invalid_client`, so clients that lost their registration (or were given one another
replica forgot) register again: an unknown or deleted client, a missing or wrong secret,
two different ids, a metadata document that is now refused (`client_lookup.token_client`).
The secret is compared as its SHA-256, in constant time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from typing import Any
from urllib.parse import unquote

import asyncpg
from aiohttp import hdrs, web
from multidict import MultiMapping

from service.auth.clients.lookup import token_client
from service.auth.clients.metadata_documents import is_metadata_client_id
from service.auth.clients.registry import Client, load_client
from service.auth.oauth.registration import hash_client_secret
from service.auth.oauth.responses import single
from service.errors import FetchRefused, OAuthError


def _invalid(description: str, *, basic: bool = False) -> OAuthError:
    err = OAuthError("invalid_client", description, status=401)
    if basic:
        err.headers[hdrs.WWW_AUTHENTICATE] = 'Basic realm="elova"'
    return err


def _basic(request: web.Request) -> tuple[str, str] | None:
    header = request.headers.get(hdrs.AUTHORIZATION, "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise _invalid("the Basic credentials are malformed", basic=True) from None
    client_id, colon, secret = decoded.partition(":")
    if not colon:
        raise _invalid("the Basic credentials are malformed", basic=True)
    return unquote(client_id), unquote(secret)


async def authenticated_client(
    request: web.Request,
    params: MultiMapping[Any],
    conn: asyncpg.Connection,
    *,
    operator: bool = False,
) -> Client:
    """The calling client, authenticated as it registered, or OAuthError (401)."""
    basic = _basic(request)
    form_id = single(params, "client_id")
    form_secret = single(params, "client_secret")
    if basic is not None:
        if form_id is not None and form_id != basic[0]:
            raise _invalid("client_id differs from the Basic credentials", basic=True)
        client_id: str = basic[0]
        secret: str | None = basic[1]
    else:
        if not form_id:
            raise OAuthError("invalid_request", "the client_id parameter is required")
        client_id, secret = form_id, form_secret
    if is_metadata_client_id(client_id):
        try:
            client = await token_client(request.app, conn, client_id)
        except FetchRefused as err:
            raise _invalid(f"the client's metadata document is refused: {err}") from None
    else:
        client = await load_client(conn, client_id, operator=operator)
    if client is None:
        raise _invalid("the client is not registered", basic=basic is not None)
    if client.confidential and not _secret_matches(client, secret):
        raise _invalid("the client secret is missing or wrong", basic=basic is not None)
    return client


def _secret_matches(client: Client, secret: str | None) -> bool:
    if not secret or client.secret_hash is None:
        return False
    return hmac.compare_digest(hash_client_secret(secret), client.secret_hash)
