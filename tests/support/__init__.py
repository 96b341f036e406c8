"""Shared test support: real PostgreSQL and Redis, keys, snapshots, clients."""
