"""A rolling restart loses no request: three real `elova-mcp serve` replicas (one database,
one Redis prefix) behind Debian's HAProxy with the shipped deploy/haproxy.cfg, under a
steady mixed load (stateless 2026-07-28 tool calls, 2025-11-25 sessions reused across
calls, rotating OAuth refreshes), restarted one at a time with SIGTERM and started again
on the same port, each back in HAProxy's pool before the next goes.

Zero failures: no connection error, no 5xx, no 404 for a live session, no tool error; only
the answers the same load gets with no restart. The limits are raised so that no 429
occurs (they would be counted apart). The drain runs with its shipped default
(ELOVA_DRAIN_SECONDS 5 s).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator

import aiohttp
import asyncpg
import pytest

from service.auth.tokens import TokenService
from service.config import Config
from tests.hostile.processes import Replicas
from tests.hostile.world import World, build_world
from tests.support.haproxy import OwnHAProxy, haproxy_command
from tests.support.rolling import MixedLoad, Timeline, roll
from tests.support.server import free_port
from tests.support.services import TestDatabase

pytestmark = pytest.mark.slow

REPLICAS = 3
GENEROUS = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "LIMIT_ACCOUNT_CONCURRENCY": "64",
    "LIMIT_GLOBAL_CONCURRENCY": "64",
    "EXPECTED_REPLICAS": str(REPLICAS),
}
WARM_SECONDS = 2.0  # load before the first restart and after the last
MIN_REQUESTS = 2000


@pytest.fixture
def haproxy_installed() -> Iterator[None]:
    if haproxy_command() is None:
        if os.environ.get("CI"):
            pytest.fail("haproxy is required in CI (.ci/debian-packages.txt)")
        pytest.skip("haproxy is not installed")
    yield


async def _seed(replicas: Replicas, dsn: str) -> World:
    cfg = Config.from_env({**replicas.env, "ELOVA_PORT": str(replicas.ports[0])})
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        return await build_world(pool, TokenService(cfg))
    finally:
        await pool.close()


@pytest.mark.timeout(240)  # ~60 s on a quiet machine; a replica start slows under load
async def test_three_replicas_rolled_under_load_fail_no_request(
    haproxy_installed: None, test_database: TestDatabase
) -> None:
    front = free_port()
    # The public URL (token audience, allowed Host) is the balancer's, as in a deployment.
    env = {**GENEROUS, "PUBLIC_URL": f"http://127.0.0.1:{front}"}
    replicas = Replicas(test_database.dsn, replicas=REPLICAS, env=env)
    world = await _seed(replicas, test_database.dsn)
    lb = OwnHAProxy(replicas.ports, port=front)
    replicas.start()
    try:
        lb.start()  # HAProxy starts with every server UP; replicas.start() waited for them
        timeout = aiohttp.ClientTimeout(total=30)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            load = MixedLoad(session, lb.url, world)
            tasks = load.start()
            started = time.monotonic()
            timelines: list[Timeline] = []
            try:
                await asyncio.sleep(WARM_SECONDS)
                for i in range(REPLICAS):
                    timelines.append(await roll(replicas, i, lb))
                await asyncio.sleep(WARM_SECONDS)
            finally:
                await load.stop(tasks)
            seconds = time.monotonic() - started
    finally:
        lb.stop()
        replicas.stop()

    tally = load.tally
    report = [f"{tally.summary()} in {seconds:.1f} s"]
    for timeline in timelines:
        report.append(f"replica {timeline.replica}:")
        report += timeline.lines()
    print("\n".join(report))  # the figures of the run, shown with -s
    assert tally.failures() == {}, "\n".join([*report, *tally.examples])
    assert tally.count("429") == 0, tally.summary()
    assert tally.total >= MIN_REQUESTS, tally.summary()
    for kind in ("stateless tools/call", "session tools/call", "oauth refresh"):
        assert tally.counts[kind]["ok"] > 0, tally.summary()
    for timeline in timelines:
        assert timeline.exit_code == 0, timeline
        # The order that makes the roll lossless: readiness fails, HAProxy stops routing
        # here, and only then does the listener close.
        assert 0 <= timeline.readiness_down < timeline.marked_down < timeline.listener_closed
        assert timeline.listener_closed <= timeline.exited < timeline.started
        assert timeline.started < timeline.ready <= timeline.marked_up
