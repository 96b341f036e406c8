"""A TCP collector killed (SIGKILL) and restarted while a real `elova-mcp serve` (uvloop) streams
its audit lines to it: the sink reconnects, every answered call's line reaches a collector
at least once (what the dead one had not stored is sent again to the new one), no line
arrives torn, and no call is refused 503 once the collector is back."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from tests.support.approvals import seed_member
from tests.support.mcp_wire import tool_call
from tests.support.server import ROOT, ServeProcesses, free_port
from tests.support.services import TestDatabase

WORKERS = 4
GENEROUS_LIMITS = {
    "LIMIT_GLOBAL_CONCURRENCY": "100",
    "LIMIT_ACCOUNT_CONCURRENCY": "100",
    "LIMIT_APPROVAL_PER_MINUTE": "100000",
}


class CollectorProcess:
    """tests/audit/collector.py on a port, appending what it receives to `path`."""

    def __init__(self, port: int, path: Path) -> None:
        self.port, self.path = port, path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> CollectorProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.audit.collector", str(self.port), str(self.path)],
            cwd=ROOT, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == b"listening\n"
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()

    def lines(self) -> tuple[list[dict[str, Any]], bytes]:
        """The whole lines received, each parsed (a torn one raises), and any unfinished tail."""
        data = self.path.read_bytes() if self.path.exists() else b""
        *whole, tail = data.split(b"\n")
        return [json.loads(raw) for raw in whole], tail


@pytest.fixture
def collectors(tmp_path: Path) -> Iterator[list[CollectorProcess]]:
    port = free_port()
    found = [CollectorProcess(port, tmp_path / "first.jsonl"),
             CollectorProcess(port, tmp_path / "restarted.jsonl")]  # fmt: skip
    yield found
    for collector in found:
        collector.kill()


@pytest.mark.timeout(90)
async def test_lines_reach_a_collector_killed_and_restarted_mid_stream(
    test_database: TestDatabase, collectors: list[CollectorProcess]
) -> None:
    first, restarted = collectors
    pool = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=1)
    try:
        who = await seed_member(pool, workspaces=1)
    finally:
        await pool.close()
    first.start()
    env = {**GENEROUS_LIMITS, "AUDIT_SINK": f"tcp:127.0.0.1:{first.port}"}
    answers: list[tuple[float, int, str]] = []  # (when, status, request id)
    back_at = float("inf")
    with ServeProcesses(test_database.dsn, env=env) as server:
        issued = await server.approve(account=who.email, workspaces=who.workspaces)
        body, headers = tool_call("get_many_workspaces", {"limit": 2}, token=issued.access_token)
        stop = asyncio.Event()

        async def calls(http: aiohttp.ClientSession) -> None:
            while not stop.is_set():
                async with http.post(server.mcp_url, json=body, headers=headers) as resp:
                    await resp.read()
                    answers.append((time.monotonic(), resp.status, resp.headers["X-Request-Id"]))

        async with aiohttp.ClientSession() as http:
            workers = [asyncio.create_task(calls(http)) for _ in range(WORKERS)]
            await asyncio.sleep(1.5)
            first.kill()  # mid-stream: what it received and had not stored is gone
            await asyncio.sleep(1.0)
            restarted.start()
            back_at = time.monotonic()
            await asyncio.sleep(2.5)
            stop.set()
            await asyncio.gather(*workers)
        answered = {rid for _, status, rid in answers if status == 200}
        for _ in range(100):  # the writer backs off at most a second between tries
            if answered <= _request_ids(collectors):
                break
            await asyncio.sleep(0.1)
    statuses = [status for _, status, _ in answers]
    assert len(answered) > 100 and set(statuses) <= {200, 503}, statuses
    late = [status for when, status, _ in answers if when > back_at + 1.5]
    assert late and late.count(503) == 0  # once the collector is back, no call is refused
    missing = answered - _request_ids(collectors)
    assert not missing, f"{len(missing)} of {len(answered)} answered calls have no line"
    new_lines, tail = restarted.lines()
    assert tail == b"" and {line["type"] for line in new_lines} == {"tool.call"}  # none torn
    assert len(new_lines) > 0


def _request_ids(collectors: list[CollectorProcess]) -> set[str]:
    return {
        line["context"]["request_id"] for collector in collectors for line in collector.lines()[0]
    }
