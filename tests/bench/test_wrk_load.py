"""The CPU-a-call section's wrk generator sends the job's request as built (path, headers,
body with quotes, escapes and non-ASCII text) and counts every answer without the expected
text as an error, as the Python generator does."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.bench import profiles_bench, wrk_load
from tests.bench.loadgen import Job, Request, Result

pytestmark = pytest.mark.skipif(not wrk_load.available(), reason="needs Debian's wrk")

BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "params": {"name": 'Ölimport "quoted" \\ ✓\n'}})
HEADERS = {"Authorization": "Bearer abc.def", "Accept": "application/json, text/event-stream"}


async def test_wrk_sends_the_request_and_checks_every_answer(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    seen = {"right": 0, "wrong": 0, "answered_wrong": 0}

    async def answer(request: web.Request) -> web.Response:
        body = await request.text()
        headers_right = all(request.headers.get(k) == v for k, v in HEADERS.items())
        if body != BODY or not headers_right:
            seen["wrong"] += 1
            return web.Response(text="unexpected request", status=400)
        seen["right"] += 1
        if seen["right"] % 10 == 0:  # every tenth a 200 without the expected text
            seen["answered_wrong"] += 1
            return web.Response(text='{"isError":true}')
        return web.Response(text='{"result":{"isError":false}}')

    app = web.Application()
    app.router.add_post("/mcp", answer)
    server = await aiohttp_server(app)
    assert server.port is not None
    job = Job(host="127.0.0.1", port=server.port, concurrency=4, warmup_seconds=0,
              duration_seconds=1, expect='"isError":false',
              requests=[Request(path="/mcp", headers=HEADERS, body=BODY)])  # fmt: skip
    assert wrk_load.supports(job)
    result = await asyncio.to_thread(wrk_load.run, job)
    assert seen["wrong"] == 0
    assert result.completed > 50
    # wrk may close with requests in flight that it does not count: at most one a connection.
    answered = result.completed + result.errors
    assert 0 <= seen["right"] - answered <= job.concurrency
    assert abs(result.errors - seen["answered_wrong"]) <= job.concurrency
    assert result.errors >= result.completed // 10 - job.concurrency
    assert result.first_error.startswith("200 ") and "isError" in result.first_error
    assert result.p50_ms > 0 and result.rps > 0
    assert result.statuses == {"200": result.completed + result.errors}


async def test_wrk_counts_refusals_by_status(
    aiohttp_server: Callable[[web.Application], Awaitable[TestServer]],
) -> None:
    async def refuse(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=401, text='{"error":"invalid_token"}')

    app = web.Application()
    app.router.add_post("/mcp", refuse)
    server = await aiohttp_server(app)
    assert server.port is not None
    one = Request(path="/mcp", headers={}, body="{}")
    job = Job(host="127.0.0.1", port=server.port, concurrency=2, warmup_seconds=0,
              duration_seconds=1, requests=[one])  # fmt: skip
    result = await asyncio.to_thread(wrk_load.run, job)
    assert result.completed == 0 and result.statuses["401"] == result.errors > 50
    assert set(result.statuses) == {"401"} and result.first_error.startswith("401 ")


def test_jobs_wrk_cannot_run_keep_the_python_generator() -> None:
    one = Request(path="/mcp", headers={}, body="{}")
    assert not wrk_load.supports(Job(host="h", port=1, requests=[one, one]))
    assert not wrk_load.supports(Job(host="h", port=1, requests=[one], opening=[one]))
    assert not wrk_load.supports(Job(host="h", port=1, requests=[one], max_requests=5))


def test_a_job_under_shedding_keeps_the_python_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    """wrk times every answer (a paced 503 too) and reads no Retry-After: a job under shedding
    (`native=False`, as the overload line asks) runs the Python generator even where wrk is."""
    used: list[str] = []

    def by_wrk(job: Job, prefix: list[str] | None = None) -> Result:
        used.append("wrk")
        raise AssertionError("wrk ran a job under shedding")

    class Done:
        returncode = 0
        stdout = msgspec.json.encode(Result(1, 0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0))

    def by_python(*args: object, **kwargs: object) -> Done:
        used.append("python")
        return Done()

    monkeypatch.setattr(wrk_load, "run", by_wrk)
    monkeypatch.setattr("tests.bench.profiles_bench.subprocess.run", by_python)
    one = Request(path="/mcp", headers={}, body="{}")
    profiles_bench.pinned_load(Job(host="h", port=1, requests=[one]), native=False)
    assert used == ["python"]
