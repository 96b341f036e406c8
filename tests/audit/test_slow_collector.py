"""A slow TCP collector (3,000 B/s, reading straight from its socket) killed (SIGKILL) with
most of a real `elova-mcp serve`'s audit lines still unread in the kernels' buffers, then
restarted: every answered call's line reaches a collector at least once (the sink kept what
the dead one may not have read, by bytes, and sends it again at once), none torn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.audit.stuck import seeded
from tests.audit.test_collector_restart import GENEROUS_LIMITS, CollectorProcess
from tests.support.mcp_wire import tool_call
from tests.support.server import ServeProcesses, free_port
from tests.support.services import TestDatabase

LINES = 905
RATE = 3000  # bytes a second the first collector reads
WORKERS = 4


class SlowCollector(CollectorProcess):
    def start(self) -> SlowCollector:
        import subprocess
        import sys

        from tests.support.server import ROOT

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.audit.collector", str(self.port), str(self.path),
             str(RATE)],
            cwd=ROOT, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline() == b"listening\n"
        return self


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_every_line_reaches_a_collector_after_a_slow_one_dies(
    test_database: TestDatabase, tmp_path: Path
) -> None:
    who = await seeded(test_database.dsn)
    port = free_port()
    slow = SlowCollector(port, tmp_path / "slow.jsonl")
    restarted = CollectorProcess(port, tmp_path / "restarted.jsonl")
    env = {**GENEROUS_LIMITS, "AUDIT_SINK": f"tcp:127.0.0.1:{port}"}
    answered: set[str] = set()
    try:
        slow.start()
        with ServeProcesses(test_database.dsn, env=env) as server:
            issued = await server.approve(account=who.email, workspaces=who.workspaces)
            body, headers = tool_call(
                "get_many_workspaces", {"limit": 2}, token=issued.access_token
            )

            async def calls(http: aiohttp.ClientSession) -> None:
                while len(answered) < LINES:
                    async with http.post(server.mcp_url, json=body, headers=headers) as resp:
                        await resp.read()
                        assert resp.status == 200, resp.status
                        answered.add(resp.headers["X-Request-Id"])

            async with aiohttp.ClientSession() as http:
                await asyncio.gather(*(calls(http) for _ in range(WORKERS)))
            await asyncio.sleep(1.0)
            read_before = len(_ids(slow))
            slow.kill()  # most lines unread: in its socket's and our send buffer
            assert read_before < len(answered) // 2, (read_before, len(answered))
            await asyncio.sleep(1.0)
            restarted.start()  # no call after it: the sink resends without a new line
            for _ in range(300):
                if answered <= _ids(slow) | _ids(restarted):
                    break
                await asyncio.sleep(0.1)
        missing = answered - (_ids(slow) | _ids(restarted))
        got = [*_all(slow), *_all(restarted)]
        delivered = {line["context"]["request_id"] for line in got}
        report = {"written": len(answered), "read_by_the_slow_one": read_before,
                  "delivered": len(delivered & answered),
                  "duplicated": len(got) - len(delivered)}  # fmt: skip
        print("slow collector:", json.dumps(report))
        assert len(answered) >= LINES
        assert not missing, f"{len(missing)} of {len(answered)} lines lost: {report}"
        assert restarted.lines()[1] == b""  # none torn on the new connection
    finally:
        slow.kill()
        restarted.kill()


def _all(collector: CollectorProcess) -> list[dict[str, Any]]:
    lines, _ = collector.lines()
    return lines


def _ids(collector: CollectorProcess) -> set[str]:
    return {line["context"]["request_id"] for line in _all(collector)}
