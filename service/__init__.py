"""Elova MCP service: nine read-only MCP tools over retained n8n metadata."""

__version__ = "0.3.0"
