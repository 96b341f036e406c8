"""The names of the HTTP headers this service defines or reads beyond the standard ones
(those come from aiohttp.hdrs): one definition each."""

from __future__ import annotations

REQUEST_ID = "X-Request-Id"
# Streamable HTTP (docs/protocol.md): the 2025 revisions' session, every revision's version
# header, and the 2026-07-28 method and name headers that must repeat the body.
SESSION_ID = "Mcp-Session-Id"
PROTOCOL_VERSION = "MCP-Protocol-Version"
METHOD = "Mcp-Method"
NAME = "Mcp-Name"
# draft-ietf-httpapi-ratelimit-headers (docs/limits.md)
RATE_LIMIT = "RateLimit"
RATE_LIMIT_POLICY = "RateLimit-Policy"
