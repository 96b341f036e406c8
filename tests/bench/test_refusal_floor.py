"""The bench's same-work floor answers our refusal byte for byte (the request id aside), and
the overload line reads server-side latency from the access lines of the measured window."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.bench.overload_bench import server_latencies
from tests.bench.reference import Answer, same_work_app

AppClient = TestClient[web.Request, web.Application]

BODY = '{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Unauthorized"}}'
CHALLENGE = 'Bearer error="invalid_token", resource_metadata="http://127.0.0.1/x"'


async def test_the_same_work_floor_sends_our_answer(
    aiohttp_client: Callable[[web.Application], Awaitable[AppClient]],
) -> None:
    answer = Answer(
        401,
        [("Content-Type", "application/json"), ("WWW-Authenticate", CHALLENGE),
         ("X-Request-Id", "ours"), ("Content-Length", "1"), ("Date", "then")],
        BODY,
    )  # fmt: skip
    client = await aiohttp_client(same_work_app(answer))
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "get_many_executions", "arguments": {}}}  # fmt: skip
    resp = await client.post("/mcp", json=call)
    assert resp.status == 401
    assert await resp.text() == BODY
    assert resp.headers["WWW-Authenticate"] == CHALLENGE
    assert resp.headers["Content-Type"] == "application/json"
    assert resp.headers["X-Request-Id"] not in ("", "ours")


def _line(at: float, status: int, duration_ms: float, path: str = "/mcp") -> dict[str, Any]:
    from datetime import UTC, datetime

    stamp = datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds")
    return {"time": stamp, "level": "info", "logger": "elova.access", "path": path,
            "status": status, "duration_ms": duration_ms}  # fmt: skip


def test_server_latencies_read_the_window_s_answered_calls(tmp_path: Path) -> None:
    start = 1_800_000_000.0
    lines = [_line(start - 1, 200, 500.0)]  # the warm-up: left out
    lines += [_line(start + i / 100, 200, float(i + 1)) for i in range(100)]
    lines += [_line(start + 2, 503, 900.0), _line(start + 2, 200, 900.0, "/readyz")]
    log = tmp_path / "server.log"
    log.write_text("not json\n" + "\n".join(json.dumps(line) for line in lines) + "\n")
    assert server_latencies(log, start) == (51.0, 100.0)
