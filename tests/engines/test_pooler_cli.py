"""Every operator command through PgBouncer in transaction mode, as an operator runs them
(subprocesses, ELOVA_DATABASE_URL naming the pooler), on a database of their own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from tests.support.engines_pg import PgBouncer
from tests.support.mcp_wire import tool_call
from tests.support.server import free_port
from tests.support.services import TestDatabase
from tests.support.snapshots import Snapshot, member

ELOVA = Path(sys.executable).with_name("elova-mcp")


@pytest.fixture
async def fresh_database(test_database: TestDatabase) -> AsyncIterator[TestDatabase]:
    """An empty database (no schema: `migrate` makes it, through the pooler)."""
    db = TestDatabase(test_database.admin_dsn, f"elova_engines_{secrets.token_hex(4)}")
    admin = await asyncpg.connect(db.admin_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{db.name}"')
        yield db
        await admin.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')
    finally:
        await admin.close()


def _env(url: str, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env.update(ELOVA_DATABASE_URL=url, ELOVA_DATABASE_POOLER="transaction", **more)
    return env


async def _run(env: dict[str, str], *args: str, stdin: str = "") -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(ELOVA),
        *args,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(stdin.encode()), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.timeout(60)  # one process per operator command: 6 to 14 s under coverage
async def test_every_operator_command_works_through_the_pooler(
    pgbouncer: PgBouncer, fresh_database: TestDatabase, tmp_path: Path, signing_key_pem: bytes
) -> None:
    env = _env(pgbouncer.dsn(fresh_database.name), ELOVA_SIGNING_KEY=signing_key_pem.decode())

    # migrate: two at once (the transaction-level lock serialises them), then once more.
    first, second = await asyncio.gather(_run(env, "migrate"), _run(env, "migrate"))
    assert (first[0], second[0]) == (0, 0), (first, second)
    code, out, err = await _run(env, "migrate")
    assert (code, err) == (0, ""), err

    # load
    snap = Snapshot()
    acc = snap.account()
    ws = snap.workspace(members=[member(acc)])
    inst = snap.instance(ws)
    wf = snap.workflow(inst)
    snap.execution(inst, wf)
    path = tmp_path / "snapshot.json"
    path.write_bytes(snap.document())
    code, out, err = await _run(env, "load", str(path))
    assert code == 0 and "1 workspaces" in out, err

    # account: create, set-password (passwords from stdin)
    email = f"op-{secrets.token_hex(3)}@example.test"
    code, out, err = await _run(
        env, "account", "create", "--email", email, "--name", "Op", stdin="a long password 1\n"
    )
    assert code == 0, err
    code, _, err = await _run(
        env, "account", "set-password", "--email", email, stdin="a long password 2\n"
    )
    assert code == 0, err

    # approve, --list, --revoke
    code, out, err = await _run(env, "approve", "--account", acc["email"], "--workspace", ws["id"])
    assert code == 0, err
    approval = json.loads(out)
    code, out, err = await _run(env, "approve", "--list", "--account", acc["email"])
    assert code == 0 and [a["approvalId"] for a in json.loads(out)["approvals"]] == [
        approval["approvalId"]
    ], err
    code, out, err = await _run(env, "approve", "--revoke", approval["approvalId"])
    assert code == 0 and json.loads(out)["revoked"] is True, err

    # demo-data (a small plan) and its --replace
    small = ["--workflows", "5", "--instances", "2", "--executions", "500"]
    code, out, err = await _run(env, "demo-data", *small)
    assert code == 0, err
    code, out, err = await _run(env, "demo-data", *small, "--replace")
    assert code == 0, err

    direct = await asyncpg.connect(fresh_database.dsn)
    try:
        assert await direct.fetchval("SELECT count(*) FROM executions") == 501
        assert await direct.fetchval("SELECT count(*) FROM schema_migrations") > 0
    finally:
        await direct.close()


async def test_run_demo_prepares_and_serves_through_the_pooler(
    pgbouncer: PgBouncer, fresh_database: TestDatabase, tmp_path: Path
) -> None:
    port = free_port()
    env = _env(
        pgbouncer.dsn(fresh_database.name),
        ELOVA_HOST="127.0.0.1",
        ELOVA_PORT=str(port),
        ELOVA_DB_POOL_MIN="1",
    )
    proc = await asyncio.create_subprocess_exec(
        str(ELOVA), "run-demo", "--data-dir", str(tmp_path), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    banner = ""
    try:
        async with asyncio.timeout(90):
            while "Ctrl-C stops the service" not in banner:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    raise AssertionError(banner + (await proc.stderr.read()).decode())
                banner += line
        url = re.search(r"MCP endpoint\s+(\S+)", banner)
        token = re.search(r"export ELOVA_TOKEN=(\S+)", banner)
        assert url and token, banner
        body, headers = tool_call("get_many_workspaces", {}, token=token.group(1))
        async with aiohttp.ClientSession() as http:
            for _ in range(100):  # the banner comes just before the listener binds
                try:
                    async with http.post(url.group(1), json=body, headers=headers) as resp:
                        answer = await resp.json()
                        break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.1)
        assert answer["result"]["structuredContent"]["workspaces"], answer
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0
