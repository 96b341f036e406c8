"""The fleet-wide cap with a replica cut off from Redis: two `elova-mcp serve` replicas, a
fleet cap of 4, slow calls from several accounts (the `workspaces` table locked, as in
test_multiprocess.py), and one replica reaching Redis through a relay that is cut mid-run.

The backends waiting on the lock, sampled every 10 ms throughout, are the requests in
PostgreSQL at once: never more than 4, before the cut, while the cut replica's lease runs
out and its block passes to the other, and after the relay heals. The cut replica's
/readyz says `"fleet": "no_lease"` while it holds no lease, and is ready again once healed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest

from tests.limits.test_multiprocess import (  # noqa: F401 - the fixtures
    DEADLINE,
    GRACE,
    Client,
    Probe,
    Replica,
    Seeder,
    probe,
    replica_env,
    seed_config,
    seeder,
)
from tests.support.mcp_wire import tool_call
from tests.support.services import REDIS_URL
from tests.support.tcp_proxy import TcpProxy

# processes, a relay and timing: run with no other test beside
pytestmark = [pytest.mark.slow, pytest.mark.alone]

FLEET = 4
LEASE = 3.0  # service/limits/fleet.py LEASE_SECONDS
CAPACITY = "elova_mcp_limit_replica_capacity_requests"


def _through(relay: TcpProxy) -> str:
    parts = urlsplit(REDIS_URL)
    host = f"127.0.0.1:{relay.port}"
    if parts.password is not None or parts.username is not None:
        host = f"{parts.netloc.rsplit('@', 1)[0]}@{host}"
    return urlunsplit(parts._replace(netloc=host))


@asynccontextmanager
async def replicas(envs: list[dict[str, str]]) -> AsyncIterator[list[Replica]]:
    started = [Replica(env) for env in envs]
    try:
        async with aiohttp.ClientSession() as http:
            for r in started:
                r.start()
            for r in started:
                await r.ready(http)
        yield started
    finally:
        for r in started:
            r.kill()
            r.log.unlink(missing_ok=True)


async def _readyz(http: aiohttp.ClientSession, replica: Replica) -> tuple[int, dict[str, Any]]:
    async with http.get(f"http://127.0.0.1:{replica.port}/readyz") as resp:
        return resp.status, await resp.json()


async def _until(what: Any, seconds: float) -> float:
    """Poll the coroutine function `what` until it is true; the seconds it took."""
    start = time.monotonic()
    while not await what():
        assert time.monotonic() - start < seconds, f"not within {seconds} s"
        await asyncio.sleep(0.1)
    return time.monotonic() - start


async def _loop_calls(http: aiohttp.ClientSession, replica: Replica, client: Client) -> None:
    """Slow calls, one after another, until cancelled (each is blocked by the lock until
    its deadline, or refused 429 when no slot came within the wait)."""
    body, headers = tool_call("get_many_workspaces", {}, token=client.token, client="limits-test")
    while True:
        with contextlib.suppress(aiohttp.ClientError, ValueError):
            async with http.post(replica.url, json=body, headers=headers) as resp:
                await resp.read()
        await asyncio.sleep(0.05)


@pytest.mark.timeout(150)
async def test_the_fleet_cap_holds_with_a_replica_cut_off_from_redis(
    replica_env: dict[str, str],  # noqa: F811
    seeder: Seeder,  # noqa: F811
    probe: Probe,  # noqa: F811
) -> None:
    host, port = urlsplit(REDIS_URL).hostname, urlsplit(REDIS_URL).port
    relay = await TcpProxy(host or "127.0.0.1", port or 6379).start()
    # ELOVA_EXPECTED_REPLICAS=1 (the default): before, the cut replica fell back to all 4.
    env = {**replica_env, "ELOVA_LIMIT_FLEET_CONCURRENCY": str(FLEET)}
    env["ELOVA_EXPECTED_REPLICAS"] = "1"
    accounts = [await seeder.account(approvals=2) for _ in range(6)]
    connector = aiohttp.TCPConnector(limit=0)
    async with (
        replicas([env, {**env, "ELOVA_REDIS_URL": _through(relay)}]) as (kept, cut),
        aiohttp.ClientSession(connector=connector) as http,
    ):

        async def ready(replica: Replica) -> bool:
            return (await _readyz(http, replica))[0] == 200

        async def capacity(replica: Replica, at_least: int) -> bool:
            return (await replica.metric(http, CAPACITY) or 0) >= at_least

        for r in (kept, cut):
            await _until(lambda r=r: ready(r), 10)
        await probe.lock()
        loops = [
            asyncio.create_task(_loop_calls(http, (kept, cut)[i % 2], client))
            for i, account in enumerate(accounts)
            for client in account
        ]
        sampler = asyncio.create_task(probe.watch(3600))
        try:
            await asyncio.sleep(4)
            before = probe.max_seen
            await relay.cut()
            # Not ready once its lease has run out (3 s from its last renewal's sending),
            # and saying why.
            lapsed = await _until(lambda: _not_ready(http, cut), LEASE + 5)
            status, body = await _readyz(http, cut)
            assert (status, body["fleet"], body["redis"]) == (503, "no_lease", "degraded")
            assert await cut.metric(http, CAPACITY) == 0
            # Its block passes to the other replica once its record ends: after the lease,
            # the request deadline and the grace, when nothing it admitted still runs.
            await _until(lambda: capacity(kept, FLEET), LEASE + DEADLINE + GRACE + 6)
            await asyncio.sleep(2)
            assert (await _readyz(http, cut))[0] == 503
            await relay.restore()
            healed = await _until(lambda: ready(cut), 10)
            # It gets a share back as the other's requests end (within their deadline).
            await _until(lambda: capacity(cut, 1), DEADLINE + 6)
            await asyncio.sleep(2)
        finally:
            sampler.cancel()
            for task in loops:
                task.cancel()
            await asyncio.gather(sampler, *loops, return_exceptions=True)
            await probe.unlock()
            await relay.cut()
    print(f"max in PostgreSQL: {probe.max_seen} (before the cut {before})")
    print(f"not ready {lapsed:.1f} s after the cut, ready {healed:.1f} s after the heal")
    assert before == FLEET  # the load filled the cap
    assert probe.max_seen <= FLEET
    assert lapsed <= LEASE + 2


async def _not_ready(http: aiohttp.ClientSession, replica: Replica) -> bool:
    return (await _readyz(http, replica))[0] == 503
