"""MCP over streamable HTTP (STUB: replaced by the transport work)."""

from __future__ import annotations

from aiohttp import web


def setup_mcp(app: web.Application) -> None:
    pass
