"""A real `elova-mcp serve` whose stdout is a pipe nobody reads: once the pipe is full the
process keeps answering `/livez` and `/metrics` (log lines dropped and counted), audited
calls wait their bounded time and are refused 503 (never answered without a line), and
SIGTERM stops it."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import aiohttp
import pytest

from tests.audit.stuck import StuckServe, seeded
from tests.support.server import free_port
from tests.support.services import TestDatabase


@pytest.mark.timeout(90)
async def test_a_pipe_nobody_reads_does_not_freeze_the_process(
    test_database: TestDatabase,
) -> None:
    who = await seeded(test_database.dsn)
    port, metrics_port = free_port(), free_port()
    serve = StuckServe(test_database.dsn, port, {
        "LOG_LEVEL": "INFO", "METRICS_PORT": str(metrics_port), "AUDIT_WAIT_SECONDS": "0.5",
        "AUDIT_QUEUE_LINES": "50",
    })  # fmt: skip
    read_end, write_end = os.pipe()  # read_end is never read
    proc = serve.start(write_end, subprocess.DEVNULL)
    os.close(write_end)
    url = serve.url
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            statuses = await serve.calls_until_refused(http, who)
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
