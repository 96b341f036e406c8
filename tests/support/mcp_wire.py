"""A correct 2026-07-28 `tools/call` request — body and headers — for tests that call tools
over HTTP but are not about the wire itself. tests/mcp (golden exchanges) and tests/hostile
(every part mutated) build their requests by hand on purpose and do not use this."""

from __future__ import annotations

from typing import Any

MODERN = "2026-07-28"


def tool_call(
    name: str,
    arguments: Any,
    *,
    token: str | None = None,
    request_id: int | str = 1,
    client: str = "elova-tests",
) -> tuple[dict[str, Any], dict[str, str]]:
    """(body, headers) of one stateless tools/call; with a bearer header when `token` is given."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {
            "name": name,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": name,
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return body, headers
