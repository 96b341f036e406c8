"""The `make run` demo: its snapshot document and the `demo-data` bulk plan.
Modules: docs/architecture.md."""
