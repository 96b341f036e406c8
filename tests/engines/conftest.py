"""The engines of tests/engines, one of each per test run: PgBouncer (transaction mode) in
front of the test PostgreSQL, and a private primary with its streaming standby."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.support.engines_pg import (
    PgBouncer,
    PrivateCluster,
    start_pgbouncer,
    start_private_cluster,
)
from tests.support.services import TestDatabase

# What an operator sets on the role (ALTER ROLE … SET) for ELOVA_DATABASE_POOLER_SETTINGS=
# server, here set by PgBouncer on each server connection of the database alias SETTLED.
SETTLED = "elova_settled"
SETTLED_QUERY = "SET statement_timeout = 31000; SET jit = off"


@pytest.fixture(scope="session")
def pgbouncer(test_database: TestDatabase) -> Iterator[PgBouncer]:
    aliases = {SETTLED: f"dbname={test_database.name} connect_query='{SETTLED_QUERY}'"}
    bouncer = start_pgbouncer(urlsplit(test_database.admin_dsn).port or 5432, aliases=aliases)
    yield bouncer
    bouncer.stop()


@pytest.fixture(scope="session")
def private_cluster() -> Iterator[PrivateCluster]:
    cluster = start_private_cluster()
    yield cluster
    cluster.stop()
