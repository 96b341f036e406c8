"""A real `elova-mcp serve` whose stdout is a pipe nobody reads (tests/audit/test_stdout_blocked.py,
test_shutdown_report.py): its start, and audited calls until its queue refuses them."""

from __future__ import annotations

import os
import subprocess
from typing import IO

import aiohttp
import asyncpg

from tests.hostile.processes import wait_live
from tests.support.approvals import Member, seed_member
from tests.support.mcp_wire import tool_call
from tests.support.server import ROOT, _serve_command, _Server, server_env

GENEROUS = {
    "LIMIT_GLOBAL_CONCURRENCY": "100", "LIMIT_ACCOUNT_CONCURRENCY": "100",
    "LIMIT_APPROVAL_PER_MINUTE": "100000",
}  # fmt: skip


async def seeded(dsn: str) -> Member:
    async with asyncpg.create_pool(dsn, min_size=1, max_size=1) as pool:
        return await seed_member(pool, workspaces=1)


class StuckServe:
    """The process on `port` with `settings`, its stdout `stdout` (a pipe's write end)."""

    def __init__(self, dsn: str, port: int, settings: dict[str, str]) -> None:
        self.dsn, self.port = dsn, port
        self.env = server_env(dsn, ports=[port], env={**GENEROUS, **settings})
        self.url = f"http://127.0.0.1:{port}"

    def start(self, stdout: int, stderr: int | IO[bytes] | None) -> subprocess.Popen[bytes]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
        return subprocess.Popen(
            _serve_command(), env={**base, **self.env, "ELOVA_PORT": str(self.port)},
            cwd=ROOT, stdout=stdout, stderr=stderr,
        )  # fmt: skip

    async def calls_until_refused(self, http: aiohttp.ClientSession, who: Member) -> list[int]:
        """Audited tool calls until five in a row are 503 (the pipe, the 1 MiB buffer,
        then the queue full); their statuses."""
        await wait_live(http, self.url)
        server = _Server(self.dsn, ports=[self.port])
        server.env = self.env
        issued = await server.approve(account=who.email, workspaces=who.workspaces)
        body, headers = tool_call("get_many_workspaces", {}, token=issued.access_token)
        statuses: list[int] = []
        for _ in range(4000):  # ~1.5 KB of log and audit a call
            async with http.post(self.url + "/mcp", json=body, headers=headers) as resp:
                await resp.read()
                statuses.append(resp.status)
            if statuses[-5:] == [503] * 5:
                break
        return statuses
