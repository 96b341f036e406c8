"""From body bytes to a checked request: JSON-RPC envelope, era, and (2026-07-28) the
header/body agreement the streamable HTTP transport requires. All before authentication.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

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
    METHOD_HEADER,
    MODERN,
    NAME_BEARING,
    NAME_HEADER,
    PROTOCOL_VERSION_HEADER,
    SUPPORTED,
    decode_header_value,
    is_modern,
)

# No MCP message nests deeply; bounding it keeps every later decode of a part of the body
# (params, arguments) far below the interpreter's recursion limit.
MAX_NESTING = 64
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


@dataclass(frozen=True)
class Incoming:
    id: p.RequestId | None  # None: a notification
    method: str
    params: bytes  # raw JSON object ("{}" when absent)
    modern: bool

    @property
    def is_notification(self) -> bool:
        return self.id is None


class _Named(msgspec.Struct):
    name: Any = UNSET
    uri: Any = UNSET


def parse(body: bytes, headers: Mapping[str, str]) -> Incoming:
    """Decode the envelope and tell its era; raise ParseError / InvalidRequest (HTTP 400)."""
    envelope = _decode(body)
    if _nested_deeper_than(body, MAX_NESTING):
        raise _too_deep()
    if envelope.id is None:
        raise InvalidRequest("Invalid Request: id must be a string or a number")
    params = bytes(envelope.params) if isinstance(envelope.params, msgspec.Raw) else b"{}"
    meta = _meta(params)
    meta_version = meta.get(META_PROTOCOL_VERSION) if meta is not None else None
    modern = is_modern(headers.get(PROTOCOL_VERSION_HEADER), meta_version)
    request_id = None if isinstance(envelope.id, UnsetType) else envelope.id
    return Incoming(request_id, envelope.method, params, modern)


def tool_name(params: bytes) -> str | None:
    """The `name` of tools/call params, if they are an object with a string name."""
    try:
        named = msgspec.json.decode(params, type=_Named)
    except msgspec.DecodeError:
        return None
    return named.name if isinstance(named.name, str) else None


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
    header_version = headers.get(PROTOCOL_VERSION_HEADER)
    if header_version is None:
        raise HeaderMismatch("Header mismatch: the MCP-Protocol-Version header is required")
    if header_version != MODERN:
        raise UnsupportedProtocolVersion(
            "Unsupported protocol version",
            data={"supported": list(SUPPORTED), "requested": header_version},
        )
    meta = _meta(incoming.params)
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
    _check_header(headers, METHOD_HEADER, incoming.method, encoded=False)
    key = NAME_BEARING.get(incoming.method)
    if key is not None:
        try:
            named = msgspec.json.decode(incoming.params, type=_Named)
        except msgspec.DecodeError as err:
            raise InvalidParams(f"Invalid params: {err}", http_status=400) from err
        _check_header(headers, NAME_HEADER, getattr(named, key), encoded=True)


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
