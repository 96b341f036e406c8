"""`elova-mcp load FILE` as an operator runs it: a subprocess, exit codes, messages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from uuid import UUID

import asyncpg

from tests.support.services import TestDatabase
from tests.support.snapshots import Snapshot

ROOT = Path(__file__).resolve().parents[2]


def run_load(database: TestDatabase | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    if database is not None:
        env["ELOVA_DATABASE_URL"] = database.dsn
    return subprocess.run(
        [sys.executable, "-m", "service", "load", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def snapshot_file(tmp_path: Path, snap: Snapshot) -> str:
    path = tmp_path / "snapshot.json"
    path.write_bytes(snap.document())
    return str(path)


async def test_load_prints_a_summary_and_exits_0(
    test_database: TestDatabase, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    snap = Snapshot()
    ws = snap.workspace(members=[])
    inst = snap.instance(ws)
    snap.workflow(inst)
    snap.workflow(inst)
    path = snapshot_file(tmp_path, snap)
    done = run_load(test_database, path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") == 1
    assert "1 workspaces" in done.stdout and "2 workflows" in done.stdout
    assert (
        await db_pool.fetchval(
            "SELECT count(*) FROM workflows WHERE instance_id = $1", UUID(inst["id"])
        )
        == 2
    )
    again = run_load(test_database, path)
    assert again.returncode == 0 and again.stdout == done.stdout


async def test_a_bad_record_exits_1_naming_it(
    test_database: TestDatabase, db_pool: asyncpg.Pool, tmp_path: Path
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    bad = snap.workflow(inst, observedAt="yesterday")
    done = run_load(test_database, snapshot_file(tmp_path, snap))
    assert done.returncode == 1 and done.stdout == ""
    assert f"workflows[0] (id {bad['id']}): observedAt:" in done.stderr
    assert "nothing was changed" in done.stderr
    assert "Traceback" not in done.stderr
    assert (
        await db_pool.fetchval("SELECT count(*) FROM workspaces WHERE id = $1", UUID(ws["id"])) == 0
    )


def test_unreadable_and_non_json_files_exit_1(test_database: TestDatabase, tmp_path: Path) -> None:
    missing = run_load(test_database, str(tmp_path / "nope.json"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr
    garbage = tmp_path / "garbage.json"
    garbage.write_bytes(b"\x89PNG not json")
    bad = run_load(test_database, str(garbage))
    assert bad.returncode == 1 and "not valid JSON" in bad.stderr
    assert "Traceback" not in missing.stderr + bad.stderr


def test_without_database_url_it_is_a_configuration_error(tmp_path: Path) -> None:
    done = run_load(None, str(tmp_path / "x.json"))
    assert done.returncode == 2 and "ELOVA_DATABASE_URL" in done.stderr
