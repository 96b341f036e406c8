"""The MCP Apps views (extension io.modelcontextprotocol/ui): the `ui://` resources, their
built HTML in built/ and its sources in src/ (docs/views.md). Modules: docs/architecture.md."""
