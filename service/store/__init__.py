"""PostgreSQL access: the pool, migrations, the snapshot loader and one module a record family."""
