"""The JSON-RPC 2.0 envelope and the MCP result shapes, as msgspec Structs encoded once.

A request of a method we answer decodes in one pass into its tagged Struct with typed
params (`known_request_decoder`); any other is read as a plain `Envelope`. Results carry the
2026-07-28 fields (`resultType`, `ttlMs`, `cacheScope`, `_meta` serverInfo) only when the
request is modern: session clients validate results against their own revision.
"""

from __future__ import annotations

from typing import Any, Literal, get_args, get_type_hints

import msgspec
from msgspec import UNSET, UnsetType

RequestId = int | str

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# Application codes (outside the JSON-RPC reserved range) that mirror the HTTP status of
# refusals the protocol defines no code for; clients act on the status.
UNAUTHORIZED = 401
FORBIDDEN = 403
TOO_MANY_REQUESTS = 429

COMPLETE = "complete"


class Envelope(msgspec.Struct):
    """One JSON-RPC request or notification (no `id`). `id: null` is refused: MCP forbids it.
    The shape of any method's message: read when `known_request_decoder` refused one."""

    jsonrpc: Literal["2.0"]
    method: str
    id: RequestId | None | UnsetType = UNSET
    params: msgspec.Raw | UnsetType = UNSET


class RequestParams(msgspec.Struct, kw_only=True):
    """Params every method accepts; unknown members are ignored (extensions may add some)."""

    meta: dict[str, Any] | UnsetType = msgspec.field(default=UNSET, name="_meta")


class ListParams(RequestParams, kw_only=True):
    cursor: str | None | UnsetType = UNSET


class CallToolParams(RequestParams, kw_only=True):
    name: str
    arguments: msgspec.Raw | UnsetType = UNSET


class ReadResourceParams(RequestParams, kw_only=True):
    uri: str


class InitializeParams(RequestParams, kw_only=True, rename="camel"):
    protocol_version: str
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    client_info: dict[str, Any] = msgspec.field(default_factory=dict)


# ---- requests of the methods we answer, tagged by `method` -------------------------------
# One decode gives the envelope and the method's typed params (msgspec tagged unions). A
# message this union refuses (an unknown method, params of the wrong shape, a bad envelope)
# is read again as an `Envelope` to answer it precisely (service/mcp/envelope.py).


class _Request(msgspec.Struct, kw_only=True, tag_field="method"):
    jsonrpc: Literal["2.0"]
    id: RequestId | None | UnsetType = UNSET


class DiscoverRequest(_Request, kw_only=True, tag="server/discover"):
    params: RequestParams | UnsetType = UNSET


class InitializeRequest(_Request, kw_only=True, tag="initialize"):
    params: InitializeParams | UnsetType = UNSET


class PingRequest(_Request, kw_only=True, tag="ping"):
    params: RequestParams | UnsetType = UNSET


class ToolsListRequest(_Request, kw_only=True, tag="tools/list"):
    params: ListParams | UnsetType = UNSET


class ToolsCallRequest(_Request, kw_only=True, tag="tools/call"):
    params: CallToolParams | UnsetType = UNSET


class ResourcesListRequest(_Request, kw_only=True, tag="resources/list"):
    params: ListParams | UnsetType = UNSET


class ResourcesReadRequest(_Request, kw_only=True, tag="resources/read"):
    params: ReadResourceParams | UnsetType = UNSET


class ResourceTemplatesListRequest(_Request, kw_only=True, tag="resources/templates/list"):
    params: ListParams | UnsetType = UNSET


class PromptsListRequest(_Request, kw_only=True, tag="prompts/list"):
    params: ListParams | UnsetType = UNSET


KnownRequest = (
    DiscoverRequest
    | InitializeRequest
    | PingRequest
    | ToolsListRequest
    | ToolsCallRequest
    | ResourcesListRequest
    | ResourcesReadRequest
    | ResourceTemplatesListRequest
    | PromptsListRequest
)


def _params_by_method() -> dict[str, type[RequestParams]]:
    """Each request's params Struct by its method (its tag), read off the classes above."""
    found: dict[str, type[RequestParams]] = {}
    for kind in get_args(KnownRequest):
        params = get_args(get_type_hints(kind)["params"])
        found[str(kind.__struct_config__.tag)] = next(t for t in params if t is not UnsetType)
    return found


# The method of each request Struct, and the params Struct of each method we answer.
METHOD_OF: dict[type[msgspec.Struct], str] = {
    kind: str(kind.__struct_config__.tag) for kind in get_args(KnownRequest)
}
PARAMS_OF = _params_by_method()


# ---- results ---------------------------------------------------------------------------


class Implementation(msgspec.Struct, rename="camel"):
    name: str
    version: str
    title: str
    website_url: str
    icons: list[dict[str, Any]]


class _Modern(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """Fields a 2026-07-28 result carries; UNSET (omitted) for session revisions."""

    result_type: str | UnsetType = UNSET
    meta: dict[str, Any] | UnsetType = msgspec.field(default=UNSET, name="_meta")


class _Cacheable(_Modern, kw_only=True):
    ttl_ms: int | UnsetType = UNSET
    cache_scope: str | UnsetType = UNSET


class DiscoverResult(_Cacheable, kw_only=True):
    supported_versions: list[str]
    capabilities: dict[str, Any]
    instructions: str


class InitializeResult(msgspec.Struct, rename="camel"):
    protocol_version: str
    capabilities: dict[str, Any]
    server_info: Implementation
    instructions: str


class EmptyResult(_Modern, kw_only=True):
    pass


class ToolsList(_Cacheable, kw_only=True):
    tools: msgspec.Raw


class ResourcesList(_Cacheable, kw_only=True):
    resources: list[Any]


class ResourcesRead(_Cacheable, kw_only=True):
    contents: list[Any]


class ResourceTemplatesList(_Cacheable, kw_only=True):
    resource_templates: list[Any]


class PromptsList(_Cacheable, kw_only=True):
    prompts: list[Any]


class TextContent(msgspec.Struct, kw_only=True):
    type: str = "text"
    text: str


class CallToolResult(_Modern, kw_only=True):
    content: list[TextContent] | msgspec.Raw  # Raw: `text_content`'s bytes
    structured_content: msgspec.Raw | UnsetType = UNSET
    is_error: bool


# ---- envelopes -------------------------------------------------------------------------


class ResultResponse(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None  # never None in practice: notifications get no result
    result: Any


class ErrorObject(msgspec.Struct, omit_defaults=True):
    code: int
    message: str
    data: Any = UNSET


class ErrorResponse(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    error: ErrorObject


_encoder = msgspec.json.Encoder()
encode = _encoder.encode

envelope_decoder = msgspec.json.Decoder(Envelope)
known_request_decoder = msgspec.json.Decoder(KnownRequest)


# A text block as `[TextContent(text=…)]` encodes it, around the JSON string of its text.
_TEXT_HEAD, _TEXT_TAIL = msgspec.json.encode([TextContent(text="")]).split(b'""')


def text_content(structured: bytes) -> msgspec.Raw:
    """`[TextContent(text=structured.decode())]` as JSON, byte for byte as msgspec encodes
    it, made from the bytes (`text_pieces` joined)."""
    return msgspec.Raw(b"".join(text_pieces(structured)))


def text_pieces(structured: bytes) -> tuple[bytes, ...]:
    """`text_content`'s bytes in pieces, for a caller that joins them into a larger body
    (one copy of the page instead of two): a string's JSON escapes `"`, `\\` and control
    characters, and the only control characters JSON holds raw are the whitespace between
    its tokens (none in msgspec's own output; a Raw field copied from the store may have
    some: that text takes msgspec's path). An ASCII page (most pages) takes msgspec's path
    too: its string encoder escapes in one pass, faster than the two replaces, and an ASCII
    str is one byte a character.
    For a page with other characters, decoding to str and encoding again was the slower
    way (a str of 2 or 4 bytes a character), most of all past U+FFFF."""
    if structured.isascii():
        return _TEXT_HEAD, encode(structured.decode("ascii")), _TEXT_TAIL
    if b"\n" in structured or b"\r" in structured or b"\t" in structured:
        return (encode([TextContent(text=structured.decode("utf-8"))]),)
    escaped = structured.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    return _TEXT_HEAD, b'"', escaped, b'"', _TEXT_TAIL


def result_body(request_id: RequestId | None, result: Any) -> bytes:
    return encode(ResultResponse(id=request_id, result=result))


# Stand-ins for the two large members of a success result: the envelope is encoded around
# them, then the page is joined in once (encoding it inside the envelope copied it twice
# more, through a growing buffer). Never in msgspec's output: it escapes control characters.
_TEXT_MARK, _STRUCTURED_MARK = b"\x00text\x00", b"\x00structured\x00"


def success_body(
    request_id: RequestId | None, structured: bytes, meta: dict[str, Any] | None = None
) -> bytes:
    """A tool's success answer, byte for byte `result_body(request_id, result)` of the
    `CallToolResult` holding `structured` as structuredContent and as its text block
    (`text_content`); with `meta` (a 2026-07-28 call), resultType complete and that _meta."""
    frame = CallToolResult(
        content=msgspec.Raw(_TEXT_MARK),
        structured_content=msgspec.Raw(_STRUCTURED_MARK),
        is_error=False,
    )
    if meta is not None:
        frame.result_type = COMPLETE
        frame.meta = meta
    head, _, rest = result_body(request_id, frame).partition(_TEXT_MARK)
    middle, _, tail = rest.partition(_STRUCTURED_MARK)
    return b"".join((head, *text_pieces(structured), middle, structured, tail))


def error_body(request_id: RequestId | None, code: int, message: str, data: Any = UNSET) -> bytes:
    data = UNSET if data is None else data
    return encode(ErrorResponse(id=request_id, error=ErrorObject(code, message, data)))
