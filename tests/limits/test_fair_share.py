"""Slow calls of a few accounts against a real `elova-mcp serve` at its default admission
and shedding settings: their waiters are not in flight, so another account's tools/list is
always answered and its tool calls are admitted (the fair queue hands it the next free slot)
or refused 429 with Retry-After, never shed 503. Calls are made slow by holding an ACCESS
EXCLUSIVE lock on `workspaces` (get_workspace reads it after admission)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import aiohttp
import asyncpg
import pytest

from service.auth.tokens import TokenService
from service.config import Config
from service.store.load_snapshot import load_snapshot
from tests.hostile.processes import Replicas
from tests.hostile.wire import Mcp, Reply
from tests.hostile.world import Granted, grant
from tests.support.services import TestDatabase
from tests.support.snapshots import Snapshot, member

# a timed flood of one replica for ~15 s: run with no other test beside
pytestmark = [pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(120)]

SLOW_ACCOUNTS = 3
LOOPERS = 12  # a slow account's concurrent calls: more than its 2 running + 8 waiting
LOCK_SECONDS = 3.0
FLOOD_SECONDS = 12.0
# Defaults everywhere but the approval's rate budget (the flood must reach the slots) and
# the loop-lag signal (this test is about the in-flight one; 2 shared cores lag).
ENV: dict[str, str | None] = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "ELOVA_DB_POOL_MIN": None,
    "ELOVA_DB_POOL_MAX": None,
    "ELOVA_SHED_ADMISSION": None,
    "ELOVA_SHED_MAX_INFLIGHT": None,
}


async def _accounts(dsn: str, replicas: Replicas, count: int) -> list[Granted]:
    """`count` accounts, one workspace and one approval each."""
    snap = Snapshot()
    accounts = [snap.account(name=f"fair {n}") for n in range(count)]
    workspaces = [
        snap.workspace(name=f"fair ws{n}", members=[member(a, "owner")])
        for n, a in enumerate(accounts)
    ]
    cfg = Config.from_env({**replicas.env, "ELOVA_PORT": str(replicas.ports[0])})
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await load_snapshot(conn, snap.document())
        return [
            await grant(
                pool, TokenService(cfg), f"fair{n}", uuid.UUID(a["id"]), [uuid.UUID(w["id"])]
            )
            for n, (a, w) in enumerate(zip(accounts, workspaces, strict=True))
        ]
    finally:
        await pool.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=60)
    ) as s:
        yield s


async def _locking(dsn: str, stop: asyncio.Event) -> None:
    """Hold the lock on `workspaces` LOCK_SECONDS at a time, with short gaps, until `stop`."""
    conn = await asyncpg.connect(dsn)
    try:
        while not stop.is_set():
            async with conn.transaction():
                await conn.execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE")
                await asyncio.sleep(LOCK_SECONDS)
            await asyncio.sleep(0.2)
    finally:
        await conn.close()


def _call_of(granted: Granted) -> tuple[str, dict[str, str]]:
    return "get_workspace", {"workspaceId": str(granted.workspaces[0])}


async def _loop(stop: asyncio.Event, seen: list[Reply], call: object) -> None:
    while not stop.is_set():
        reply = await call()  # type: ignore[operator]
        seen.append(reply)
        await asyncio.sleep(0.01)


async def _flood(
    session: aiohttp.ClientSession, test_database: TestDatabase, env: dict[str, str | None]
) -> tuple[list[Reply], list[Reply], list[Reply]]:
    """Three accounts loop slow calls; the bystander loops tools/list and two tool calls.
    Returns the bystander's tools/list replies, its tool-call replies, the slow ones'."""
    replicas = Replicas(test_database.dsn, env=env)
    *slow, bystander = await _accounts(test_database.dsn, replicas, SLOW_ACCOUNTS + 1)
    replicas.start()
    stop = asyncio.Event()
    listed: list[Reply] = []
    called: list[Reply] = []
    flooded: list[Reply] = []
    try:
        mcp = Mcp(session, replicas.url() + "/mcp")
        locker = asyncio.create_task(_locking(test_database.dsn, stop))
        loops = [
            _loop(stop, flooded, lambda g=g: mcp.call(g.token, *_call_of(g)))
            for g in slow
            for _ in range(LOOPERS)
        ]
        await asyncio.sleep(0.5)  # the flood's slots and queues first
        loops.append(_loop(stop, listed, lambda: mcp.method(bystander.token, "tools/list")))
        loops += [
            _loop(stop, called, lambda: mcp.call(bystander.token, *_call_of(bystander)))
            for _ in range(2)
        ]
        tasks = [asyncio.create_task(c) for c in loops]
        await asyncio.sleep(FLOOD_SECONDS)
        stop.set()
        await asyncio.gather(*tasks, locker)
    finally:
        stop.set()
        replicas.stop()
    return listed, called, flooded


def _share(replies: list[Reply]) -> str:
    counts = Counter(r.status for r in replies)
    return ", ".join(f"{status}: {n}" for status, n in sorted(counts.items()))


async def test_other_accounts_slow_calls_never_shed_a_bystander(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    started = time.monotonic()
    listed, called, flooded = await _flood(session, test_database, ENV)
    assert time.monotonic() - started < 60
    assert any(r.status == 429 for r in flooded), "the flood should reach its bounds"
    # tools/list takes its admission like every request (docs/limits.md): while the flood
    # holds every replica slot longer than the wait, it is told 429 for `global`.
    for replies in (listed, called):
        assert replies and all(r.status in (200, 429) for r in replies), _share(replies)
        for reply in replies:
            if reply.status == 429:
                assert reply.headers["Retry-After"].isdigit()
                assert reply.json["error"]["data"]["limit"] in ("global", "account")
    admitted = sum(r.status == 200 for r in called) / len(called)
    print(f"bystander tool calls: {_share(called)}; admitted {admitted:.0%}")
    print(f"bystander tools/list: {_share(listed)}; flood: {_share(flooded)}")
    assert admitted > 0, "the fair queue should hand the bystander a slot"


async def test_the_adaptive_limit_sheds_a_bystander_rarely(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    env = ENV | {"ELOVA_SHED_ADMISSION": "adaptive"}
    listed, called, flooded = await _flood(session, test_database, env)
    mine = listed + called
    shed = sum(r.status == 503 for r in mine) / len(mine)
    print(f"adaptive, bystander: tools/list {_share(listed)}; tool calls {_share(called)}")
    print(f"adaptive, flood: {_share(flooded)}; bystander shed {shed:.1%}")
    assert shed <= 0.05, f"{shed:.1%} of the bystander's requests shed"
