"""The benchmark data sets: dedicated databases (`elova_bench`, `elova_bench_quick`, and the
growth section's smaller and many-tenant ones) of N executions in one workspace or spread over
several, written by `elova-mcp demo-data`, kept across runs.

Generating ten million executions takes minutes, so the database records what it holds in
a `bench_dataset` row; a run reuses it when the plan matches, and `--rebuild` drops the
database and writes it again. Migrations are applied on every run (new indexes land on the
existing data).
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from service.store.migrate import migrate
from tests.support.services import ADMIN_DSN

SEED = 2026
_MARKER = """
CREATE TABLE IF NOT EXISTS bench_dataset (
    executions bigint NOT NULL, workflows integer NOT NULL, instances integer NOT NULL,
    seed integer NOT NULL, generated_at timestamptz NOT NULL, seconds double precision NOT NULL
)
"""
# Sets of several workspaces record how many; a set without the column holds one.
_WORKSPACES = (
    "ALTER TABLE bench_dataset ADD COLUMN IF NOT EXISTS workspaces integer NOT NULL DEFAULT 1"
)
_BUSIEST = (
    "SELECT workspace_id FROM executions WHERE workspace_id = ANY($1::uuid[])"
    " GROUP BY workspace_id ORDER BY count(*) DESC, workspace_id LIMIT 1"
)


@dataclass(frozen=True)
class Dataset:
    dsn: str
    executions: int
    workflows: int
    instances: int
    seed: int
    generated_at: datetime
    generation_seconds: float
    reused: bool
    account_email: str
    workspace_id: str  # the busiest workspace (the only one, in a one-workspace set)
    workspace_ids: tuple[str, ...] = ()  # every workspace of the set, the busiest first


def _dsn(name: str) -> str:
    base, _, _ = ADMIN_DSN.rpartition("/")
    return f"{base}/{name}"


async def ensure(
    name: str, executions: int, workflows: int, instances: int, *, rebuild: bool,
    workspaces: int = 1,
) -> Dataset:  # fmt: skip
    admin = await asyncpg.connect(ADMIN_DSN)
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists and rebuild:
            await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = None
        if not exists:
            await admin.execute(f"CREATE DATABASE \"{name}\" ENCODING 'UTF8' TEMPLATE template0")
    finally:
        await admin.close()
    dsn = _dsn(name)
    conn = await asyncpg.connect(dsn)
    try:
        await migrate(conn)
        await conn.execute(_MARKER)
        await conn.execute(_WORKSPACES)
        row = await conn.fetchrow("SELECT * FROM bench_dataset")
        wanted = (executions, workflows, instances, SEED)
        reused = row is not None and tuple(row)[:4] == wanted and row["workspaces"] == workspaces
        if not reused:
            if row is not None:
                raise SystemExit(f"{name} holds another data set ({dict(row)}); run with --rebuild")
            seconds = _generate(dsn, executions, workflows, instances, workspaces)
            await conn.execute(
                "INSERT INTO bench_dataset VALUES ($1, $2, $3, $4, now(), $5, $6)",
                *wanted, seconds, workspaces,
            )  # fmt: skip
            row = await conn.fetchrow("SELECT * FROM bench_dataset")
        assert row is not None
        email = f"bulk-{SEED}@elova.dev"
        ids = [
            str(r["workspace_id"])
            for r in await conn.fetch(
                "SELECT m.workspace_id FROM memberships m JOIN accounts a ON a.id = m.account_id"
                " WHERE a.email = $1 ORDER BY m.workspace_id",
                email,
            )
        ]
        busiest = ids[0] if len(ids) == 1 else str(await conn.fetchval(_BUSIEST, ids))
        ids.remove(busiest)
    finally:
        await conn.close()
    return Dataset(
        dsn=dsn,
        executions=executions,
        workflows=workflows,
        instances=instances,
        seed=SEED,
        generated_at=row["generated_at"],
        generation_seconds=row["seconds"],
        reused=reused,
        account_email=email,
        workspace_id=busiest,
        workspace_ids=(busiest, *ids),
    )


def _generate(dsn: str, executions: int, workflows: int, instances: int, workspaces: int) -> float:
    """`elova-mcp demo-data` as an operator runs it; its progress goes to our stderr."""
    command = [
        sys.executable, "-m", "service", "demo-data", "--workspaces", str(workspaces),
        "--instances", str(instances), "--workflows", str(workflows),
        "--executions", str(executions), "--seed", str(SEED), "--database-url", dsn,
    ]  # fmt: skip
    print(f"generating {executions:,} executions into {dsn} …", file=sys.stderr)
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=sys.stderr)
    return time.monotonic() - started
