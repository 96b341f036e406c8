"""The read statements of the retained records and approvals, one module a record family:
the tools and the authorization step call them. Modules: docs/architecture.md."""
