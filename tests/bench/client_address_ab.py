"""A/B of a good /mcp call with and without trusted proxies (issue 21): two in-process
replicas on one test database, one with ELOVA_TRUSTED_PROXIES empty and one trusting
loopback and sent an X-Forwarded-For, access lines written (JSON, to /dev/null) as in
production, called in alternating rounds of sequential calls; the median call of each.

    .venv/bin/python -m tests.bench.client_address_ab [--rounds 10] [--calls 200]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time

import aiohttp
import asyncpg

from service.observability.logs import JsonFormatter
from service.server.access_log import ACCESS
from tests.auth.flow import seed_account
from tests.support.mcp_wire import tool_call
from tests.support.server import InProcessServer
from tests.support.services import create_database, drop_database


async def _round(http: aiohttp.ClientSession, url: str, headers: dict[str, str], body: object,
                 calls: int) -> list[float]:  # fmt: skip
    took = []
    for _ in range(calls):
        started = time.perf_counter()
        async with http.post(url, json=body, headers=headers) as resp:
            await resp.read()
            assert resp.status == 200, resp.status
        took.append(time.perf_counter() - started)
    return took


async def main(rounds: int, calls: int) -> None:
    db = await create_database("elova_bench_proxy")
    sink = logging.FileHandler("/dev/null")
    sink.setFormatter(JsonFormatter())
    ACCESS.addHandler(sink)
    ACCESS.setLevel(logging.INFO)
    try:
        pool = await asyncpg.create_pool(db.dsn, min_size=1, max_size=2)
        assert pool is not None
        account = await seed_account(pool, workspaces=1)
        await pool.close()
        plain = InProcessServer(db.dsn, env={"LIMIT_APPROVAL_PER_MINUTE": "1000000"})
        proxied = InProcessServer(
            db.dsn,
            env={"LIMIT_APPROVAL_PER_MINUTE": "1000000", "TRUSTED_PROXIES": "127.0.0.0/8"},
        )
        async with plain, proxied, aiohttp.ClientSession() as http:
            sides = []
            for server, extra in ((plain, {}), (proxied, {"X-Forwarded-For": "203.0.113.5"})):
                tokens = await server.approve(account=account.email, workspaces=account.workspaces)
                body, headers = tool_call("get_many_workspaces", {}, token=tokens.access_token)
                sides.append((server.mcp_url, {**headers, **extra}, body))
            results: list[list[float]] = [[], []]
            for _ in range(rounds):
                for i, (url, headers, body) in enumerate(sides):
                    results[i] += await _round(http, url, headers, body, calls)
        for name, took in zip(
            ("no trusted proxies", "behind a trusted proxy"), results, strict=True
        ):
            took.sort()
            print(
                f"{name:24s} median {statistics.median(took) * 1000:.3f} ms"
                f"  p90 {took[int(len(took) * 0.9)] * 1000:.3f} ms  ({len(took)} calls)"
            )
    finally:
        ACCESS.removeHandler(sink)
        await drop_database(db)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.calls))
