"""What a method sees of one request (`Call`) and what it answers (`Answer`)."""

from __future__ import annotations

import math
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from service import __version__
from service.auth.authorization import Authorization
from service.auth.caller import Caller
from service.errors import InvalidParams
from service.mcp import protocol as p
from service.mcp.envelope import Incoming
from service.mcp.titles import ICON, SERVER_TITLE, WEBSITE_URL
from service.mcp.versions import META_SERVER_INFO

SERVER_INFO = p.Implementation("elova-mcp", __version__, SERVER_TITLE, WEBSITE_URL, [ICON])
# serverInfo as it appears in the `_meta` of 2026-07-28 results.
SERVER_INFO_META = msgspec.to_builtins(SERVER_INFO)

S = TypeVar("S", bound=msgspec.Struct)


class Call(msgspec.Struct, frozen=True):
    """One JSON-RPC request whose bearer token the transport verified."""

    app: web.Application
    request_id: str  # the X-Request-Id, for logs
    incoming: Incoming
    authorization: Authorization  # the caller: pending until dispatch (or its tool) confirms
    session_id: str | None = None  # the Mcp-Session-Id header (2025 revisions)
    header_version: str | None = None  # the MCP-Protocol-Version header
    # The event loop's time by which the request is answered (ELOVA_REQUEST_DEADLINE_SECONDS
    # from its verification): dispatch bounds everything by it, a tool's reads stop earlier.
    deadline_at: float = math.inf

    @property
    def id(self) -> p.RequestId | None:
        return self.incoming.id

    @property
    def method(self) -> str:
        return self.incoming.method

    @property
    def modern(self) -> bool:
        return self.incoming.modern

    @property
    def caller(self) -> Caller:
        return self.authorization.caller


class Answer(msgspec.Struct):
    """What the transport sends for one request (mutable: headers are added on the way).
    A Struct, not a dataclass: one is made for every request, and its init is cheaper than
    the dataclass's."""

    body: bytes
    status: int = 200
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    outcome: str = "ok"
    tool: str | None = None
    rpc_code: int | None = None  # the JSON-RPC error code of an error answer (traces, metrics)


def modern_meta(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2026-07-28 result `_meta`: `extra` plus the serverInfo every result carries.
    Without `extra` it is one shared dict (results only encode it: never change it)."""
    if not extra:
        return _SERVER_META
    meta = dict(extra)
    meta[META_SERVER_INFO] = SERVER_INFO_META
    return meta


_SERVER_META: dict[str, Any] = {META_SERVER_INFO: SERVER_INFO_META}


def params_of(call: Call, kind: type[S]) -> S:
    """The request's params as the method's Struct, or the InvalidParams they were refused
    with (answered now, in the method's turn)."""
    incoming = call.incoming
    if incoming.params_error is not None:
        raise incoming.params_error
    if not isinstance(incoming.params, kind):
        raise InvalidParams(f"Invalid params: expected the params of {incoming.method}")
    return incoming.params
