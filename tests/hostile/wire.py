"""The /mcp wire as a hostile client sees it: raw POSTs and 2026-07-28 tool calls, over an
aiohttp test client or a real `ClientSession`, and the checks every answer must pass.

`check_answer` is the invariant of every hostile test: whatever was sent, the answer is a
deliberate one — a well-formed JSON-RPC error or tool result, never a 5xx, never a
traceback or SQL text.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Protocol

MODERN = "2026-07-28"
STALE_TEXT = "MCP_CURSOR_STALE: Read settings changed. Restart without a cursor."
# Text that must never reach a client: Python tracebacks, SQL, driver internals.
LEAK_MARKERS = (
    "Traceback",
    'File "',
    "asyncpg",
    "SELECT ",
    "psycopg",
    "Exception",
    "Error(",
)
DELIBERATE_STATUSES = frozenset({200, 202, 204, 400, 401, 403, 404, 405, 406, 413, 415, 429})
TOOL_ERROR_CODES = frozenset(
    {"VALIDATION_ERROR", "NOT_FOUND", "MCP_CURSOR_STALE", "UNAVAILABLE", "DEADLINE_EXCEEDED"}
)


class _Response(Protocol):
    status: int
    headers: Any

    async def read(self) -> bytes: ...


class _Poster(Protocol):
    def post(self, url: str, *, data: bytes, headers: dict[str, str]) -> Any: ...

    def delete(self, url: str, *, headers: dict[str, str]) -> Any: ...


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def result(self) -> dict[str, Any]:
        document = self.json
        assert "result" in document, self.body[:500]
        result: dict[str, Any] = document["result"]
        return result

    @property
    def is_tool_error(self) -> bool:
        return self.status == 200 and bool(self.result.get("isError"))

    @property
    def error_code(self) -> str:
        """The tool error code (`_meta.code`); fails if this is not a tool error."""
        assert self.is_tool_error, self.body[:500]
        code: str = self.result["_meta"]["code"]
        return code

    @property
    def structured(self) -> dict[str, Any]:
        result = self.result
        assert result.get("isError") is False, self.body[:500]
        structured: dict[str, Any] = result["structuredContent"]
        return structured


def name_header(name: str) -> str:
    """Mcp-Name as clients send it: plain ASCII as is, anything else base64-encoded."""
    if name.isascii() and name.isprintable():
        return name
    return "=?base64?" + base64.b64encode(name.encode("utf-8", "surrogatepass")).decode() + "?="


def modern_headers(token: str | None, method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if name is not None:
        headers["Mcp-Name"] = name_header(name)
    return headers


def modern_body(method: str, params: dict[str, Any] | None = None, request_id: Any = 1) -> bytes:
    full = dict(params or {})
    full["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "hostile", "version": "1"},
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": full}
    ).encode()


class Mcp:
    """Posts to one /mcp URL through an aiohttp client (test client: url "/mcp")."""

    def __init__(self, client: _Poster, url: str = "/mcp") -> None:
        self.client = client
        self.url = url

    async def post(self, body: bytes, headers: dict[str, str], url: str | None = None) -> Reply:
        async with self.client.post(url or self.url, data=body, headers=headers) as resp:
            raw = await resp.read()
            return Reply(resp.status, dict(resp.headers), raw)

    async def call(
        self, token: str, tool: str, arguments: Any = None, request_id: Any = 1
    ) -> Reply:
        params: dict[str, Any] = {"name": tool}
        if arguments is not None:
            params["arguments"] = arguments
        body = modern_body("tools/call", params, request_id)
        return await self.post(body, modern_headers(token, "tools/call", tool))

    async def method(self, token: str, method: str, params: dict[str, Any] | None = None) -> Reply:
        return await self.post(modern_body(method, params), modern_headers(token, method))


def check_answer(reply: Reply) -> None:
    """A deliberate answer: no 5xx, a JSON-RPC 2.0 document (or empty 202/204), a tool error
    with a known code and `CODE: message` text, and nothing that looks like internals."""
    assert reply.status in DELIBERATE_STATUSES, (reply.status, reply.body[:500])
    if reply.status in (202, 204):
        assert reply.body == b""
        return
    text = reply.body.decode("utf-8")
    for marker in LEAK_MARKERS:
        assert marker not in text, (marker, text[:500])
    document = json.loads(text)
    assert isinstance(document, dict) and document.get("jsonrpc") == "2.0", text[:500]
    assert ("result" in document) != ("error" in document), text[:500]
    if "error" in document:
        error = document["error"]
        assert isinstance(error["code"], int) and isinstance(error["message"], str), text[:500]
        assert error["message"].strip(), text[:500]
        return
    result = document["result"]
    if result.get("isError"):
        meta = result["_meta"]
        assert meta["code"] in TOOL_ERROR_CODES, text[:500]
        assert result["content"][0]["text"] == f"{meta['code']}: {meta['message']}"
        assert meta["message"].strip() and isinstance(meta["retryable"], bool)
