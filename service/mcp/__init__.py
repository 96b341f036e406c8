"""MCP over streamable HTTP on `/mcp` (docs/protocol.md): the transport, the envelope,
dispatch, the error boundary, a tools/call, its span and its audit line.
Modules: docs/architecture.md."""
