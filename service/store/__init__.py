"""PostgreSQL access: the pools, migrations, the snapshot loader, the reads of one module a
record family, and what the store's failures mean. Modules: docs/architecture.md."""
