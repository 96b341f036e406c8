"""The audit trail: one JSON line per tool call and per OAuth and approval event, on its own
stream (docs/operations.md, Audit trail). Modules: docs/architecture.md."""
