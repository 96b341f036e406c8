"""OAuth JSON answers: errors (RFC 6749 §5.2) and successes, never cached."""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import hdrs, web
from multidict import MultiDictProxy, MultiMapping

from service.errors import OAuthError

NO_STORE = {hdrs.CACHE_CONTROL: "no-store", hdrs.PRAGMA: "no-cache"}
FORM = "application/x-www-form-urlencoded"


def error_response(err: OAuthError) -> web.Response:
    body = {"error": err.error, "error_description": err.description}
    response = json_response(body, status=err.status)
    response.headers.update(err.headers)
    return response


def json_response(body: Any, *, status: int = 200) -> web.Response:
    return web.Response(
        body=msgspec.json.encode(body),
        status=status,
        content_type="application/json",
        headers=NO_STORE,
    )


async def read_form(
    request: web.Request, what: str
) -> MultiDictProxy[str | bytes | bytearray | web.FileField]:
    """The urlencoded form of a token or revocation request (`what`, as the error names it);
    another content type, or a body that is not UTF-8, is an invalid_request (aiohttp would
    raise UnicodeDecodeError: a 500)."""
    if request.content_type != FORM:
        raise OAuthError("invalid_request", f"send the {what} as {FORM}")
    try:
        return await request.post()
    except UnicodeDecodeError:
        raise OAuthError("invalid_request", "the form is not valid UTF-8") from None


def single(params: MultiMapping[Any], name: str, *, error: str = "invalid_request") -> str | None:
    """The one value of a parameter; OAuth forbids sending a parameter twice."""
    values = params.getall(name, [])
    if len(values) > 1:
        raise OAuthError(error, f"the {name} parameter was sent more than once")
    return values[0] if values else None
