"""From body bytes to a checked request: JSON-RPC envelope, era, and (2026-07-28) the
header/body agreement the streamable HTTP transport requires. All before authentication.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from service.edge import headers as h
from service.edge.text_rule import json_has_nul
from service.errors import (
    HeaderMismatch,
    InvalidParams,
    InvalidRequest,
    ParseError,
    UnsupportedProtocolVersion,
)
from service.mcp import protocol as p
from service.mcp.versions import (
    META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION,
    MODERN,
    NAME_BEARING,
    SUPPORTED,
    decode_header_value,
    is_modern,
)

# No MCP message nests deeply; bounding it keeps every later decode of a part of the body
# (params, arguments) far below the interpreter's recursion limit.
MAX_NESTING = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


class Incoming(msgspec.Struct, frozen=True):
    """One decoded request: its envelope, era and (for a method we answer) typed params."""

    id: p.RequestId | None  # None: a notification
    method: str
    modern: bool
    params: p.RequestParams | None  # the method's params Struct; None: unknown or refused
    params_error: InvalidParams | None  # why the params were refused, answered in turn
    meta: dict[str, Any] | None  # params._meta
    named: object = None  # the name (or uri) the Mcp-Name header must repeat, if any

    @property
    def is_notification(self) -> bool:
        return self.id is None


class _Named(msgspec.Struct):
    name: Any = UNSET
    uri: Any = UNSET


def parse(body: bytes, headers: Mapping[str, str]) -> Incoming:
    """Decode the envelope and tell its era; raise ParseError / InvalidRequest (HTTP 400).

    A request of a method we answer is decoded once, params included; anything else (an
    unknown method, params of the wrong shape, a bad envelope) is read again as a plain
    envelope to answer it precisely. Refused params do not fail the parse: the method
    answers them after authentication (`Incoming.params_error`)."""
    try:
        known = p.known_request_decoder.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return _parse_other(body, headers)
    if _nested_deeper_than(body, MAX_NESTING):
        raise _too_deep()
    _refuse_nul(body, known.params)
    if known.id is None:
        raise InvalidRequest("Invalid Request: id must be a string or a number")
    method = p.METHOD_OF[type(known)]
    params: p.RequestParams | None
    params_error = None
    if isinstance(known.params, UnsetType):
        params, params_error = _decode_params(b"{}", method)
    else:
        params = known.params
    meta = params.meta if params is not None and not isinstance(params.meta, UnsetType) else None
    key = NAME_BEARING.get(method)
    named = None if key is None else getattr(params, key, UNSET)
    return _incoming(known.id, method, params, params_error, meta, named, headers)


def _parse_other(body: bytes, headers: Mapping[str, str]) -> Incoming:
    envelope = _decode(body)
    if _nested_deeper_than(body, MAX_NESTING):
        raise _too_deep()
    _refuse_nul(body, None)
    if envelope.id is None:
        raise InvalidRequest("Invalid Request: id must be a string or a number")
    raw = bytes(envelope.params) if isinstance(envelope.params, msgspec.Raw) else b"{}"
    params: p.RequestParams | None = None
    params_error = None
    if envelope.method in p.PARAMS_OF:
        params, params_error = _decode_params(raw, envelope.method)
    meta = _meta(raw)
    key = NAME_BEARING.get(envelope.method)
    named: object = None
    if key is not None:
        try:
            named = getattr(msgspec.json.decode(raw, type=_Named), key)
        except msgspec.DecodeError as err:
            params_error = params_error or InvalidParams(f"Invalid params: {err}")
    return _incoming(envelope.id, envelope.method, params, params_error, meta, named, headers)


def _incoming(
    request_id: p.RequestId | UnsetType,
    method: str,
    params: p.RequestParams | None,
    params_error: InvalidParams | None,
    meta: dict[str, Any] | None,
    named: object,
    headers: Mapping[str, str],
) -> Incoming:
    meta_version = meta.get(META_PROTOCOL_VERSION) if meta is not None else None
    modern = is_modern(headers.get(h.PROTOCOL_VERSION), meta_version)
    identifier = None if isinstance(request_id, UnsetType) else request_id
    return Incoming(identifier, method, modern, params, params_error, meta, named)


def _decode_params(raw: bytes, method: str) -> tuple[p.RequestParams | None, InvalidParams | None]:
    try:
        return msgspec.json.decode(raw, type=p.PARAMS_OF[method]), None
    except (msgspec.DecodeError, RecursionError) as err:
        return None, InvalidParams(f"Invalid params: {err}")


def _nested_deeper_than(body: bytes, limit: int) -> bool:
    """Whether valid JSON nests arrays/objects deeper than `limit`: strings are blanked, then
    each pass removes the innermost bracket pairs, one level a pass."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False  # too few brackets to nest that deep (every request of a real client)
    brackets = _JSON_STRING.sub(b"", body).translate(None, _NOT_BRACKETS)
    for _ in range(limit):
        if not brackets:
            return False
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return bool(brackets)


def _refuse_nul(body: bytes, params: object) -> None:
    """A NUL in a string of the envelope (method, id, tool name, `_meta`) is an invalid
    request: PostgreSQL stores no NUL in text (docs/decisions/hardening.md, "Bad bytes").
    One only inside a tool call's `arguments` is left to the tool, whose VALIDATION_ERROR
    names the argument (service/tools/base.py)."""
    if not json_has_nul(body):
        return
    arguments = getattr(params, "arguments", None)
    if isinstance(arguments, msgspec.Raw):
        rest = body.replace(bytes(arguments), b"", 1)
        if not json_has_nul(rest):
            return
    raise InvalidRequest("Invalid Request: JSON strings must not contain NUL (U+0000)")


def _too_deep() -> InvalidRequest:
    return InvalidRequest(f"Invalid Request: JSON nested deeper than {MAX_NESTING} levels")


def _decode(body: bytes) -> p.Envelope:
    try:
        return p.envelope_decoder.decode(body)
    except RecursionError as err:
        raise _too_deep() from err
    except msgspec.ValidationError as err:
        try:
            document = msgspec.json.decode(body)
        except RecursionError:
            raise _too_deep() from err
        except msgspec.DecodeError:
            raise ParseError("Parse error: the body is not valid JSON") from err
        if isinstance(document, list):
            raise InvalidRequest(
                "Invalid Request: batches are not supported; send one message a POST"
            ) from err
        raise InvalidRequest(f"Invalid Request: {err}") from err
    except msgspec.DecodeError as err:
        raise ParseError("Parse error: the body is not valid JSON") from err


def _meta(params: bytes) -> dict[str, Any] | None:
    try:
        decoded = msgspec.json.decode(params, type=p.RequestParams)
    except msgspec.DecodeError:
        return None
    return None if isinstance(decoded.meta, UnsetType) else decoded.meta


def check_modern(incoming: Incoming, headers: Mapping[str, str]) -> None:
    """2026-07-28: version supported, required `_meta` present, headers equal to the body."""
    if incoming.is_notification:
        return  # this revision defines no header rules for notification POSTs
    header_version = headers.get(h.PROTOCOL_VERSION)
    if header_version is None:
        raise HeaderMismatch("Header mismatch: the MCP-Protocol-Version header is required")
    if header_version != MODERN:
        raise UnsupportedProtocolVersion(
            "Unsupported protocol version",
            data={"supported": list(SUPPORTED), "requested": header_version},
        )
    meta = incoming.meta
    if meta is None or META_PROTOCOL_VERSION not in meta:
        raise InvalidParams(
            f"Invalid params: params._meta must carry {META_PROTOCOL_VERSION}", http_status=400
        )
    if meta[META_PROTOCOL_VERSION] != header_version:
        raise HeaderMismatch(
            f"Header mismatch: MCP-Protocol-Version header value '{header_version}' does not "
            f"match body value '{meta[META_PROTOCOL_VERSION]}'"
        )
    if not isinstance(meta.get(META_CLIENT_CAPABILITIES), dict):
        raise InvalidParams(
            f"Invalid params: params._meta must carry {META_CLIENT_CAPABILITIES}", http_status=400
        )
    _check_header(headers, h.METHOD, incoming.method, encoded=False)
    if incoming.method in NAME_BEARING:
        if incoming.params_error is not None and incoming.named is None:
            raise InvalidParams(incoming.params_error.message, http_status=400)
        _check_header(headers, h.NAME, incoming.named, encoded=True)


def _check_header(
    headers: Mapping[str, str], name: str, body_value: object, *, encoded: bool
) -> None:
    raw = headers.get(name)
    if raw is None:
        raise HeaderMismatch(f"Header mismatch: the {name} header is required")
    value = decode_header_value(raw) if encoded else raw
    if value is None or not isinstance(body_value, str) or value != body_value:
        shown = body_value if isinstance(body_value, str) else "(missing)"
        raise HeaderMismatch(
            f"Header mismatch: {name} header value '{raw}' does not match body value '{shown}'"
        )
