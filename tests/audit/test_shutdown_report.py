"""A real `elova-mcp serve` whose stdout is a pipe nobody reads, with audit lines queued at
SIGTERM: the shutdown's report of the lines not written reaches stderr, whether stderr is a
pipe of its own or the same pipe (`2>&1`, read once the report is due), and neither fd 1's
nor fd 2's open file description is ever made non-blocking by the process."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from tests.audit.stuck import StuckServe, seeded
from tests.support.server import free_port
from tests.support.services import TestDatabase

REPORT = "lines not written at shutdown"
DUE_SECONDS = 12.0  # after the listener closed: the audit drain's 10 s and the sink's 1 s


def _nonblocking(pid: int, fd: int) -> bool:
    """Whether the process's fd has O_NONBLOCK (its open file description's flags)."""
    for line in Path(f"/proc/{pid}/fdinfo/{fd}").read_text().splitlines():
        if line.startswith("flags:"):
            return bool(int(line.split()[1], 8) & os.O_NONBLOCK)
    raise AssertionError(f"no flags for fd {fd}")


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("stderr", ["own pipe", "2>&1"])
async def test_the_shutdown_report_reaches_stderr_with_stdout_stuck(
    test_database: TestDatabase, stderr: str
) -> None:
    who = await seeded(test_database.dsn)
    serve = StuckServe(test_database.dsn, free_port(), {
        "LOG_LEVEL": "INFO", "AUDIT_WAIT_SECONDS": "0.5", "AUDIT_QUEUE_LINES": "50",
        "DRAIN_SECONDS": "0",
    })  # fmt: skip
    read_end, write_end = os.pipe()  # stdout: not read until the report is due
    err_read, err_write = os.pipe() if stderr == "own pipe" else (None, None)
    proc = serve.start(write_end, subprocess.STDOUT if err_write is None else err_write)
    if err_write is not None:
        os.close(err_write)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            statuses = await serve.calls_until_refused(http, who)
            assert statuses[-1] == 503 and 200 in statuses  # lines are queued, unwritten
        assert not _nonblocking(proc.pid, 1) and not _nonblocking(proc.pid, 2)
        # our copy of the pipe's write end is the child's fd 1 (and its 2>&1 fd 2)
        assert not fcntl.fcntl(write_end, fcntl.F_GETFL) & os.O_NONBLOCK
        proc.send_signal(signal.SIGTERM)
        closed_at = await _listener_closed(serve.url)
        os.close(write_end)
        if err_read is not None:  # stderr has room: the report is there once it exits
            assert await asyncio.to_thread(proc.wait, 60) is not None
            report = _read_all(err_read)
        else:  # one stuck pipe: read it once the report waits for room
            await asyncio.sleep(max(0.0, closed_at + DUE_SECONDS - time.monotonic()))
            report = await asyncio.to_thread(_read_all, read_end)
            assert await asyncio.to_thread(proc.wait, 30) is not None
        said = [json.loads(line) for line in report.splitlines() if REPORT in line]
        assert said, report[-2000:]
        assert said[-1]["level"] == "error" and int(said[-1]["message"].split()[1]) > 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(read_end)
        if err_read is not None:
            os.close(err_read)


async def _listener_closed(url: str) -> float:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        for _ in range(300):
            try:
                async with http.get(url + "/livez") as resp:
                    await resp.read()
            except aiohttp.ClientError:
                return time.monotonic()
            await asyncio.sleep(0.05)
    raise AssertionError("the listener did not close after SIGTERM")


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    return b"".join(chunks).decode("utf-8", "replace")
