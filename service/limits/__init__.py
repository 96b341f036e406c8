"""Admission limits: each replica's own global cap, and the budgets all replicas share
through Redis (docs/limits.md); the registrations per client address. Modules:
docs/architecture.md."""
