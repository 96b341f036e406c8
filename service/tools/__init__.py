"""The nine read-only tools: one module a tool family, each exporting `TOOLS`.
Modules: docs/architecture.md."""
