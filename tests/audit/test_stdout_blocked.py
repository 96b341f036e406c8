"""A real `elova-mcp serve` whose stdout is a pipe nobody reads: once the pipe is full the
process keeps answering `/livez` and `/metrics` (log lines dropped and counted), audited
calls wait their bounded time and are refused 503 (never answered without a line), and
SIGTERM stops it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import aiohttp
import asyncpg
import pytest

from tests.support.approvals import seed_member
from tests.support.mcp_wire import tool_call
from tests.support.server import ROOT, _serve_command, free_port, server_env
from tests.support.services import TestDatabase


@pytest.mark.timeout(90)
async def test_a_pipe_nobody_reads_does_not_freeze_the_process(
    test_database: TestDatabase,
) -> None:
    pool = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=1)
    try:
        who = await seed_member(pool, workspaces=1)
    finally:
        await pool.close()
    port, metrics_port = free_port(), free_port()
    env = server_env(test_database.dsn, ports=[port], env={
        "LOG_LEVEL": "INFO", "METRICS_PORT": str(metrics_port), "AUDIT_WAIT_SECONDS": "0.5",
        "AUDIT_QUEUE_LINES": "50",
        "LIMIT_GLOBAL_CONCURRENCY": "100", "LIMIT_ACCOUNT_CONCURRENCY": "100",
        "LIMIT_APPROVAL_PER_MINUTE": "100000",
    })  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    read_end, write_end = os.pipe()  # read_end is never read
    proc = subprocess.Popen(
        _serve_command(), env={**base, **env, "ELOVA_PORT": str(port)}, cwd=ROOT,
        stdout=write_end, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    os.close(write_end)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for _ in range(300):
                try:
                    async with http.get(url + "/livez") as resp:
                        if resp.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.1)
            from tests.support.server import _Server

            server = _Server(test_database.dsn, ports=[port])
            server.env = env
            issued = await server.approve(account=who.email, workspaces=who.workspaces)
            body, headers = tool_call("get_many_workspaces", {}, token=issued.access_token)
            statuses = []
            for _ in range(4000):  # ~1.5 KB of log and audit a call: pipe, then 1 MiB fill
                async with http.post(url + "/mcp", json=body, headers=headers) as resp:
                    await resp.read()
                    statuses.append(resp.status)
                if statuses[-5:] == [503] * 5:
                    break
            assert statuses[-1] == 503 and 200 in statuses  # the bounded wait, then 503
            for _ in range(5):  # the process still answers
                async with http.get(url + "/livez") as resp:
                    assert resp.status == 200
                async with http.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                    text = await resp.text()
                    assert resp.status == 200
            dropped = [line for line in text.splitlines()
                       if line.startswith("elova_mcp_log_lines_dropped_total ")]  # fmt: skip
            assert dropped and float(dropped[0].split()[1]) > 0
            assert "elova_mcp_audit_refused_total" in text
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) is not None  # stopped, though stdout is still full
        assert time.monotonic() - started < 30
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
