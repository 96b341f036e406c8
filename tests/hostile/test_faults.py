"""Faults against real `elova-mcp serve` processes: PostgreSQL restarted under load, Redis
killed, a replica SIGKILLed while holding admission slots, slow and disconnecting clients,
and SIGTERM with requests in flight.

Dependencies that get restarted are our own (processes.py); requests are made slow on
demand by holding an ACCESS EXCLUSIVE lock on `workspaces`, which get_workspace reads after
authentication and admission — so a request holds its slot exactly while the lock is held.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import asyncpg
import pytest
import redis.asyncio as aioredis

from service.auth.tokens import TokenService
from service.config import Config
from service.store.migrate import migrate
from tests.hostile.processes import OwnPostgres, OwnRedis, Replicas, wait_live
from tests.hostile.wire import Mcp, Reply, check_answer
from tests.hostile.world import Granted, World, build_world
from tests.support.leases import held_leases
from tests.support.server import free_port
from tests.support.services import REDIS_URL, TestDatabase

pytestmark = pytest.mark.slow

GENEROUS = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "LIMIT_ACCOUNT_CONCURRENCY": "64",
    "LIMIT_GLOBAL_CONCURRENCY": "64",
}
RETRYABLE_TOOL_ERRORS = ("UNAVAILABLE", "DEADLINE_EXCEEDED")


async def seed(dsn: str, replicas: Replicas, *, fresh: bool = False) -> World:
    cfg = Config.from_env({**replicas.env, "ELOVA_PORT": str(replicas.ports[0])})
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        if fresh:
            async with pool.acquire() as conn:
                await migrate(conn)
        return await build_world(pool, TokenService(cfg))
    finally:
        await pool.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        yield s


def workspace_call(granted: Granted) -> tuple[str, dict[str, str]]:
    return "get_workspace", {"workspaceId": str(granted.workspaces[0])}


@dataclass
class Tally:
    """What a load loop saw: (seconds since start, status, tool error or JSON-RPC code)."""

    started: float = field(default_factory=time.monotonic)
    seen: list[tuple[float, int, str]] = field(default_factory=list)

    def add(self, reply: Reply) -> None:
        code = "ok"
        if reply.status == 200 and reply.result.get("isError"):
            code = reply.error_code
            assert reply.result["_meta"]["retryable"] is (code in RETRYABLE_TOOL_ERRORS)
        elif reply.status != 200:
            code = str(reply.json.get("error", {}).get("code"))
        self.seen.append((time.monotonic() - self.started, reply.status, code))


async def load(
    mcp: Mcp,
    token: str,
    stop: asyncio.Event,
    tally: Tally,
    workers: int = 4,
    allowed: tuple[int, ...] = (200, 503),
) -> None:
    async def one() -> None:
        while not stop.is_set():
            tool, arguments = "get_many_executions", {"workspaceId": "", "limit": 5}
            reply = await mcp.call(token, tool, arguments | _workspace_of(token))
            if reply.status != 503:
                check_answer(reply)
            assert reply.status in allowed, reply.body[:300]
            if reply.status in (429, 503):
                assert reply.headers["Retry-After"].isdigit()
            tally.add(reply)
            await asyncio.sleep(0.01)

    await asyncio.gather(*(one() for _ in range(workers)))


async def session_load(mcp: Mcp, token: str, stop: asyncio.Event, tally: Tally) -> None:
    """A 2025-11-25 session client: its session is checked in PostgreSQL on every call."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}  # fmt: skip
    hello = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
             "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "hostile", "version": "1"}}}  # fmt: skip
    opened = await mcp.post(json.dumps(hello).encode(), headers)
    assert opened.status == 200, opened.body[:300]
    headers |= {"Mcp-Session-Id": opened.headers["Mcp-Session-Id"],
                "MCP-Protocol-Version": "2025-11-25"}  # fmt: skip
    params = {"name": "get_many_executions", "arguments": _workspace_of(token)}
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    while not stop.is_set():
        reply = await mcp.post(json.dumps(call).encode(), headers)
        if reply.status != 503:
            check_answer(reply)
        assert reply.status in (200, 503), reply.body[:300]
        tally.add(reply)
        await asyncio.sleep(0.01)


_WORKSPACE_OF: dict[str, str] = {}


def _workspace_of(token: str) -> dict[str, str]:
    return {"workspaceId": _WORKSPACE_OF[token]}


@pytest.mark.timeout(60)  # a real PostgreSQL initdb, start, kill and restart: about 11 s
async def test_postgresql_restart_under_load(session: aiohttp.ClientSession) -> None:
    pg = OwnPostgres().init()
    try:
        metrics_port = free_port()
        replicas = Replicas(
            pg.dsn,
            env={**GENEROUS, "REQUEST_DEADLINE_SECONDS": "3", "METRICS_PORT": str(metrics_port)},
        )
        world = await seed(pg.dsn, replicas, fresh=True)
        replicas.start()
        try:
            a = world.approvals["a"]
            _WORKSPACE_OF[a.token] = str(a.workspaces[0])
            mcp = Mcp(session, replicas.url() + "/mcp")
            stop, tally = asyncio.Event(), Tally()
            loader = asyncio.gather(
                load(mcp, a.token, stop, tally), session_load(mcp, a.token, stop, tally)
            )
            await asyncio.sleep(1.0)
            down_at = time.monotonic() - tally.started
            await asyncio.to_thread(pg.stop, "fast")
            await asyncio.sleep(2.0)
            async with session.get(replicas.url() + "/livez") as live:
                assert live.status == 200, "liveness must not depend on PostgreSQL"
            await asyncio.to_thread(pg.start)
            up_at = time.monotonic() - tally.started
            await asyncio.sleep(6.0)
            stop.set()
            try:
                await asyncio.wait_for(loader, 30)
            except AssertionError as err:
                output = _errors(replicas.output())
                raise AssertionError(f"{err}\n--- server output ---\n{output}") from None
            assert replicas.procs[0].poll() is None, "the service must not have exited"
            # Every 503 the outage caused counts against availability (outcome="error"), so
            # the burn-rate alerts see a full outage; none is counted as the client's fault.
            failed = await _counted(session, metrics_port, 'outcome="error"')
            blamed_on_clients = await _counted(session, metrics_port, 'outcome="protocol_error"')
        finally:
            replicas.stop()
    finally:
        pg.destroy()
    unavailable = sum(1 for _, st, _s in tally.seen if st == 503)
    assert failed >= unavailable, (failed, unavailable)
    assert blamed_on_clients == 0, blamed_on_clients
    before = [s for t, _, s in tally.seen if t < down_at]
    during = [(st, s) for t, st, s in tally.seen if down_at + 0.3 < t < up_at]
    recovered = [t for t, _, s in tally.seen if t > up_at and s == "ok"]
    assert before and set(before) == {"ok"}, set(before)
    assert during, "no answers while PostgreSQL was down"
    refusals = {(st, s) for st, s in during}
    # While it is down: 503 + Retry-After from the bearer check, or a retryable tool error.
    assert refusals <= {(503, "-32600"), (200, "UNAVAILABLE"), (200, "DEADLINE_EXCEEDED"),
                        (200, "ok")}, refusals  # fmt: skip
    assert refusals - {(200, "ok")}, "PostgreSQL being down went unnoticed"
    assert recovered, "no success after PostgreSQL came back"
    assert recovered[0] - up_at < 5.0, f"recovery took {recovered[0] - up_at:.1f} s"
    last = [s for t, _, s in tally.seen if t > up_at + 5.0]
    assert last and set(last) == {"ok"}, set(last)


async def _metric(session: aiohttp.ClientSession, port: int, name: str) -> float:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not exported")


async def _counted(session: aiohttp.ClientSession, port: int, label: str) -> float:
    """The sum of elova_mcp_requests_total over the series carrying `label`."""
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        lines = (await resp.text()).splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("elova_mcp_requests_total{") and label in line
    )


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float) -> float:
    """Seconds until the coroutine function `check` returns True (fails after timeout)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if await check():
            return time.monotonic() - started
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


async def test_redis_killed_degrades_limits_without_errors(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    own = OwnRedis().start()
    metrics_port = None
    try:
        metrics_port = free_port()
        env = {**GENEROUS, "REDIS_URL": own.url, "METRICS_PORT": str(metrics_port)}
        replicas = Replicas(test_database.dsn, env=env)
        world = await seed(test_database.dsn, replicas)
        replicas.start()
        try:
            a = world.approvals["a"]
            _WORKSPACE_OF[a.token] = str(a.workspaces[0])
            mcp = Mcp(session, replicas.url() + "/mcp")
            name = "elova_mcp_limiter_degraded"
            assert await _metric(session, metrics_port, name) == 0
            stop, tally = asyncio.Event(), Tally()
            # One failed Redis call while the breaker is still closed is refused with the
            # short 429 hint (service/limits/admission.py): allowed, but only briefly.
            loader = asyncio.create_task(load(mcp, a.token, stop, tally, allowed=(200, 429)))
            await asyncio.sleep(0.5)
            killed_at = time.monotonic() - tally.started
            own.kill()

            async def degraded() -> bool:
                return await _metric(session, metrics_port, name) == 1

            await _eventually(degraded, 15)
            degraded_at = time.monotonic() - tally.started
            await asyncio.sleep(2.0)  # served by per-process limits meanwhile
            restarted_at = time.monotonic() - tally.started
            own.start()

            async def shared() -> bool:
                return await _metric(session, metrics_port, name) == 0

            back = await _eventually(shared, 30)
            back_at = time.monotonic() - tally.started
            await asyncio.sleep(1.5)
            stop.set()
            await asyncio.wait_for(loader, 30)
        finally:
            replicas.stop()
    finally:
        own.kill()
    codes = {s for _, _, s in tally.seen}
    assert codes <= {"ok", "429"}, f"Redis down must not fail requests: {codes}"
    refused = [t for t, _, s in tally.seen if s == "429"]
    assert len(refused) <= 8, f"{len(refused)} refusals while switching to per-process limits"
    # ...when it goes away, and again when it returns (pooled connections to the killed
    # server fail once each): never while per-process limits answer, never after.
    transitions = ((killed_at, degraded_at + 0.5), (restarted_at, back_at + 0.5))
    assert all(any(a <= t < b for a, b in transitions) for t in refused), (transitions, refused)
    degraded_answers = [s for t, _, s in tally.seen if degraded_at + 0.5 < t < restarted_at]
    assert degraded_answers.count("ok") > 10 and set(degraded_answers) == {"ok"}
    assert back < 30


async def _held_slots(redis: aioredis.Redis, prefix: str) -> int:
    return await held_leases(redis, prefix)


@dataclass
class TableLock:
    """An ACCESS EXCLUSIVE lock on `workspaces` held by our own transaction."""

    conn: asyncpg.Connection
    tx: Any
    held: bool = True

    async def release(self) -> None:
        if self.held:
            self.held = False
            await self.tx.rollback()
            await self.conn.close()


async def _locked_workspaces(dsn: str) -> TableLock:
    conn = await asyncpg.connect(dsn)
    tx = conn.transaction()
    await tx.start()
    await conn.execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE")
    return TableLock(conn, tx)


@pytest.mark.alone  # the lease of a killed replica expires within its grace, timed
async def test_sigkilled_replica_leaks_no_capacity(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    deadline, grace = 2.0, 1.0
    env = {
        "LIMIT_APPROVAL_PER_MINUTE": "1000000",
        "LIMIT_GLOBAL_CONCURRENCY": "2",
        "LIMIT_ACCOUNT_CONCURRENCY": "2",
        "REQUEST_DEADLINE_SECONDS": str(deadline),
        "LEASE_GRACE_SECONDS": str(grace),
    }
    replicas = Replicas(test_database.dsn, replicas=2, env=env)
    world = await seed(test_database.dsn, replicas)
    redis = aioredis.from_url(REDIS_URL)
    prefix = replicas.env["ELOVA_REDIS_KEY_PREFIX"]
    replicas.start()
    try:
        lock = await _locked_workspaces(test_database.dsn)
    except BaseException:
        replicas.stop()
        raise
    try:
        a = world.approvals["a"]
        tool, arguments = workspace_call(a)
        doomed = Mcp(session, replicas.url(0) + "/mcp")
        survivor = Mcp(session, replicas.url(1) + "/mcp")
        stuck = [asyncio.create_task(doomed.call(a.token, tool, arguments)) for _ in range(2)]

        async def both_held() -> bool:
            return await _held_slots(redis, prefix) == 2

        await _eventually(both_held, 10)
        replicas.signal(0, signal.SIGKILL)
        killed_at = time.monotonic()
        await lock.release()
        for task in stuck:
            with pytest.raises(aiohttp.ClientError):
                await task
        first = await survivor.call(a.token, tool, arguments)
        assert first.status == 429, "the dead replica's slots should still be held"
        assert first.json["error"]["data"]["limit"] in ("global", "account")
        while True:
            reply = await survivor.call(a.token, tool, arguments)
            if reply.status == 200:
                break
            assert reply.status == 429, reply.body[:300]
            await asyncio.sleep(0.1)
        freed_after = time.monotonic() - killed_at
        assert freed_after <= deadline + grace + 1.0, (
            f"capacity came back after {freed_after:.1f} s"
        )
        assert await _held_slots(redis, prefix) == 0
        # Full capacity: two at once are admitted again.
        pair = await asyncio.gather(*(survivor.call(a.token, tool, arguments) for _ in range(2)))
        assert [r.status for r in pair] == [200, 200]
    finally:
        await lock.release()
        replicas.stop()
        await redis.aclose()


async def test_slow_and_disconnecting_clients_hold_nothing(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    env = {
        "LIMIT_APPROVAL_PER_MINUTE": "1000000",
        "LIMIT_GLOBAL_CONCURRENCY": "2",
        "LIMIT_ACCOUNT_CONCURRENCY": "2",
        "REQUEST_DEADLINE_SECONDS": "20",
    }
    replicas = Replicas(test_database.dsn, env=env)
    world = await seed(test_database.dsn, replicas)
    redis = aioredis.from_url(REDIS_URL)
    prefix = replicas.env["ELOVA_REDIS_KEY_PREFIX"]
    replicas.start()
    writers: list[asyncio.StreamWriter] = []
    try:
        a = world.approvals["a"]
        tool, arguments = workspace_call(a)
        mcp = Mcp(session, replicas.url() + "/mcp")
        # Slow clients: twenty connections trickling a body they never finish.
        for _ in range(20):
            _, writer = await asyncio.open_connection("127.0.0.1", replicas.ports[0])
            writer.write(
                b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Authorization: Bearer " + a.token.encode() + b"\r\n"
                b'Content-Length: 1000\r\n\r\n{"jsonrpc":'
            )
            await writer.drain()
            writers.append(writer)
        for _ in range(3):
            for writer in writers:
                writer.write(b" ")
                await writer.drain()
            pair = await asyncio.gather(*(mcp.call(a.token, tool, arguments) for _ in range(2)))
            assert [r.status for r in pair] == [200, 200], "slow clients must not hold slots"
            await asyncio.sleep(0.2)
        assert await _held_slots(redis, prefix) == 0
        # Disconnecting clients: two requests admitted, then the clients vanish.
        lock = await _locked_workspaces(test_database.dsn)
        try:
            gone = [asyncio.create_task(mcp.call(a.token, tool, arguments)) for _ in range(2)]

            async def both_held() -> bool:
                return await _held_slots(redis, prefix) == 2

            await _eventually(both_held, 10)
            for task in gone:
                task.cancel()
            await asyncio.gather(*gone, return_exceptions=True)
        finally:
            await lock.release()

        async def released() -> bool:
            return await _held_slots(redis, prefix) == 0

        # Far sooner than the 25 s lease: the release is not left to expiry.
        assert await _eventually(released, 5) < 5
        pair = await asyncio.gather(*(mcp.call(a.token, tool, arguments) for _ in range(2)))
        assert [r.status for r in pair] == [200, 200]
        async with session.get(replicas.url() + "/livez") as live:
            assert live.status == 200
    finally:
        for writer in writers:
            writer.close()
        replicas.stop()
        await redis.aclose()


async def test_sigterm_lets_in_flight_requests_finish(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    replicas = Replicas(test_database.dsn, env={**GENEROUS, "REQUEST_DEADLINE_SECONDS": "20"})
    world = await seed(test_database.dsn, replicas)
    replicas.start()
    try:
        lock = await _locked_workspaces(test_database.dsn)
    except BaseException:
        replicas.stop()
        raise
    try:
        a = world.approvals["a"]
        tool, arguments = workspace_call(a)
        mcp = Mcp(session, replicas.url() + "/mcp")
        in_flight = [asyncio.create_task(mcp.call(a.token, tool, arguments)) for _ in range(3)]
        await asyncio.sleep(0.5)
        assert not any(t.done() for t in in_flight)
        replicas.signal(0, signal.SIGTERM)
        await asyncio.sleep(0.3)
        replicas.signal(0, signal.SIGTERM)  # a second signal skips the drain window
        await asyncio.sleep(0.5)
        await lock.release()
        replies = await asyncio.wait_for(asyncio.gather(*in_flight), 15)
        for reply in replies:
            check_answer(reply)
            assert reply.status == 200
            assert reply.structured["workspace"]["id"] == str(a.workspaces[0])
        code = await asyncio.to_thread(replicas.procs[0].wait, 15)
        assert code == 0, replicas.output()
    finally:
        await lock.release()
        replicas.stop()


async def test_hostile_bodies_do_not_crash_a_real_process(
    session: aiohttp.ClientSession, test_database: TestDatabase
) -> None:
    replicas = Replicas(test_database.dsn, env=GENEROUS)
    world = await seed(test_database.dsn, replicas)
    replicas.start()
    try:
        a = world.approvals["a"]
        mcp = Mcp(session, replicas.url() + "/mcp")
        headers = {"Authorization": f"Bearer {a.token}", "Content-Type": "application/json",
                   "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call"}  # fmt: skip
        bodies = [b"[" * 16000 + b"]" * 16000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
                  b"\xff" * 1000, b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":'
                  + b"[" * 10000 + b"]" * 10000 + b"}", b"x" * 40000]  # fmt: skip
        for body in bodies:
            reply = await mcp.post(body, headers)
            assert reply.status in (400, 413), reply.body[:200]
        await wait_live(session, replicas.url(), 5)
        tool, arguments = workspace_call(a)
        assert (await mcp.call(a.token, tool, arguments)).status == 200
        assert replicas.procs[0].poll() is None
        assert "Traceback" not in replicas.output()
        assert uuid.UUID(str(a.workspaces[0]))
    finally:
        replicas.stop()


def _errors(output: str) -> str:
    """The server's error lines (with their tracebacks), not its routine 503 access lines."""
    return "\n".join(
        line
        for line in output.splitlines()
        if '"status": 503' not in line and "unavailable" not in line
    )[-8000:]
