"""The adaptive in-flight limit against a real `elova-mcp serve` under overload: the limit
falls from its cap as the latency grows, the requests past it get the shed 503 with
`Retry-After` before any work, and /readyz answers 200 throughout.

The overload is made deterministic with a PostgreSQL pool of 1: with 40 tool calls at once
and the cap at 20, 19 of the admitted ones wait for the connection, so their latency is many
times the baseline whatever the machine's neighbours do.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from tests.bench import scenarios
from tests.mcp.conftest import approve
from tests.support.serve_process import ServeProcess
from tests.support.served_app import StartApp, samples

CLIENTS = 40
CAP = 20
SECONDS = 8.0  # on a busy machine ~70 calls a second are admitted: 25 a window


def tool_call(token: str, workspace_id: object) -> tuple[bytes, dict[str, str]]:
    """The bench's stateless tools/call (tests/bench/scenarios.py), as bytes and headers."""
    request = scenarios.tool_call(
        token, "get_many_executions", {"workspaceId": str(workspace_id), "limit": 50}
    )
    return request.body.encode(), request.headers


@pytest.fixture
async def adaptive_serve(
    serve_env: dict[str, str],
) -> AsyncIterator[Callable[[], ServeProcess]]:
    started: list[ServeProcess] = []

    def start() -> ServeProcess:
        proc = ServeProcess({
            **serve_env,
            "ELOVA_SHED_ADMISSION": "adaptive",
            "ELOVA_SHED_MAX_INFLIGHT": str(CAP),
            "ELOVA_SHED_LOOP_LAG_MS": "0",  # the limit alone sheds: the machine is shared
            "ELOVA_DB_POOL_MAX": "1",
            "ELOVA_LIMIT_GLOBAL_CONCURRENCY": "1000",
            "ELOVA_LIMIT_ACCOUNT_CONCURRENCY": "1000",
            "ELOVA_LIMIT_APPROVAL_PER_MINUTE": "1000000",
            "ELOVA_PACE_REFUSALS_AFTER": "0",  # every shed answered at once
            "ELOVA_LOG_LEVEL": "WARNING",
        })  # fmt: skip
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.__aexit__(None, None, None)


async def gauges(session: aiohttp.ClientSession, proc: ServeProcess) -> dict[str, float]:
    async with session.get(f"http://127.0.0.1:{proc.metrics_port}/metrics") as resp:
        text = await resp.text()
    return {name: v for (name, labels), v in samples(text).items() if not labels}


@pytest.mark.alone  # the limit follows this replica's latency: no other test's load beside
async def test_the_limit_adapts_and_sheds_before_any_work(
    start_app: StartApp, adaptive_serve: Callable[[], ServeProcess]
) -> None:
    statuses: Counter[str] = Counter()
    sheds_ok = True
    readiness: list[int] = []
    limits: list[float] = []
    async with adaptive_serve() as proc, aiohttp.ClientSession() as session:
        # A token of the same database and signing key, for the server's own address.
        granted = await approve((await start_app(PUBLIC_URL=proc.base)).app)
        body, headers = tool_call(granted["token"], granted["workspace_id"])
        before = await gauges(session, proc)
        assert before["elova_mcp_inflight_limit_adaptive"] == 1
        deadline = time.monotonic() + SECONDS

        async def client() -> None:
            nonlocal sheds_ok
            while time.monotonic() < deadline:
                async with session.post(f"{proc.base}/mcp", data=body, headers=headers) as r:
                    answer = await r.read()
                statuses[str(r.status)] += 1
                if r.status == 503:
                    error = json.loads(answer)["error"]
                    sheds_ok &= r.headers.get("Retry-After") == "1"
                    sheds_ok &= "overloaded" in error["message"]

        async def watch() -> None:
            while time.monotonic() < deadline:
                readiness.append((await proc.get("/readyz")).status)
                limits.append((await gauges(session, proc))["elova_mcp_inflight_limit"])
                await asyncio.sleep(0.2)

        await asyncio.gather(watch(), *(client() for _ in range(CLIENTS)))
        after = samples(await (await session.get(
            f"http://127.0.0.1:{proc.metrics_port}/metrics")).text())  # fmt: skip
        single = await session.post(f"{proc.base}/mcp", data=body, headers=headers)
        assert single.status == 200  # the flood over, a call is served

    assert set(statuses) == {"200", "503"}, statuses
    assert sheds_ok
    assert readiness and set(readiness) == {200}  # readiness ignores the load
    # The limit came down from the cap and stayed down (the median of the last third: the
    # baseline holds of the first seconds pin it at 2 for a moment, which proves nothing).
    assert statistics.median(limits[2 * len(limits) // 3 :]) < CAP / 2, (statuses, limits)
    assert after[("elova_mcp_inflight_limit_baseline_seconds", ())] > 0, (statuses, limits)
    assert after[("elova_mcp_inflight_limit_latency_seconds", ())] > 0
    # Before any work: every 503 is a shed (counted there), and no shed request reached the
    # request log or the MCP layer: the tool calls counted are the 200s.
    shed = after[("elova_mcp_shed_requests_total", (("reason", "inflight"),))]
    assert shed == statuses["503"]
    calls = sum(
        v for (name, labels), v in after.items()
        if name == "elova_mcp_requests_total" and ("tool", "get_many_executions") in labels
    )  # fmt: skip
    assert calls == statuses["200"]
    assert after[("elova_mcp_admitted_requests_total", ())] == statuses["200"]
