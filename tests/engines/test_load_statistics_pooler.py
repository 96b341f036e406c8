"""`elova-mcp load` through PgBouncer in transaction mode still analyses what it wrote: the
tables are found inside the load's transaction (one server connection), and the ANALYZE is
one bare statement after the commit, with no session state."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg

from tests.store.test_load_cli import ROOT, snapshot_file
from tests.store.test_load_statistics import (
    EXECUTIONS,
    RECORDS,
    analysed_since,
    analyze_counts,
    assert_estimates_exact,
    big_snapshot,
)
from tests.support.engines_pg import PgBouncer
from tests.support.services import TestDatabase


async def test_load_through_a_transaction_pooler_analyzes_what_it_wrote(
    pgbouncer: PgBouncer, test_database: TestDatabase, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    snap, _ = big_snapshot(200)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env.update(
        ELOVA_DATABASE_URL=pgbouncer.dsn(test_database.name), ELOVA_DATABASE_POOLER="transaction"
    )
    before = await analyze_counts(db_pool)
    done = subprocess.run(
        [sys.executable, "-m", "service", "load", snapshot_file(tmp_path, snap)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert await analysed_since(db_pool, before) == set(RECORDS + EXECUTIONS)
    await assert_estimates_exact(db_pool, RECORDS + EXECUTIONS)
