"""Admission limits shared by all replicas through Redis (docs/limits.md), and the
registrations per client address. Modules: docs/architecture.md."""
