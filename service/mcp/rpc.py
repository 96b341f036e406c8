"""What a method sees of one request (`Call`) and what it answers (`Answer`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from service import __version__
from service.auth.caller import Caller
from service.errors import InvalidParams
from service.mcp import protocol as p
from service.mcp.titles import ICON, SERVER_TITLE, WEBSITE_URL
from service.mcp.versions import META_SERVER_INFO

SERVER_INFO = p.Implementation("elova-mcp", __version__, SERVER_TITLE, WEBSITE_URL, [ICON])
# serverInfo as it appears in the `_meta` of 2026-07-28 results.
SERVER_INFO_META = msgspec.to_builtins(SERVER_INFO)

S = TypeVar("S", bound=msgspec.Struct)


@dataclass
class Call:
    """One authenticated JSON-RPC request."""

    app: web.Application
    request_id: str  # the X-Request-Id, for logs
    id: p.RequestId
    method: str
    params: bytes
    modern: bool
    caller: Caller


@dataclass
class Answer:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    outcome: str = "ok"
    tool: str | None = None


def modern_meta(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A 2026-07-28 result `_meta`: `extra` plus the serverInfo every result carries."""
    meta = dict(extra or {})
    meta[META_SERVER_INFO] = SERVER_INFO_META
    return meta


def decode_params(call: Call, kind: type[S]) -> S:
    try:
        return msgspec.json.decode(call.params, type=kind)
    except msgspec.DecodeError as err:
        raise InvalidParams(f"Invalid params: {err}") from err
