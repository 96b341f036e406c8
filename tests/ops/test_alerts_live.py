"""Alerts and dashboards on a real Prometheus: Debian's `prometheus` and
`prometheus-alertmanager` load the repository's rules (on the compressed clock of
tests/ops/alerting.py), scrape two real `elova-mcp serve` replicas, and each alert's cause
is induced for real — Redis killed, PostgreSQL stopped, a flood of forged tokens, replicas
killed, PostgreSQL locked (slow), and locked under a flood (overload). Each alert must reach
Alertmanager within its `for:` plus two evaluations, and leave it once the cause is gone.
Before any
incident, a load run with refusals and tool errors must give every dashboard panel data.

One PostgreSQL, Redis, replica pair, Prometheus and Alertmanager serve the whole module.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import aiohttp
import asyncpg
import pytest

from service.auth.tokens import TokenService
from service.config import Config
from service.store.migrate import migrate
from tests.hostile.processes import OwnPostgres, OwnRedis, Replicas, wait_live
from tests.hostile.wire import Mcp, modern_body, modern_headers
from tests.hostile.world import World, build_world
from tests.ops import dashboard as dash
from tests.ops.alerting import Monitoring, Seen, eventually

pytestmark = pytest.mark.slow

NO_SUCH = "00000000-0000-4000-8000-000000000000"
ENV = {
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "LIMIT_ACCOUNT_CONCURRENCY": "64",
    # Small on purpose, for the overload induction: 3 calls at once a replica (the global
    # cap is per replica: 6 across both), 4 in flight a replica before it sheds, so a 4th
    # waits for a slot and is refused `global`, and 3 PostgreSQL connections.
    "LIMIT_GLOBAL_CONCURRENCY": "3",
    # Refused at once rather than after a wait for a slot: with the lock held, a waiter
    # would hold the replica's 4th in-flight place until the admitted calls' deadline
    # freed a slot, and hardly any call would be refused `global` (docs/limits.md).
    "LIMIT_SLOT_WAIT_MS": "0",
    "SHED_ADMISSION": "fixed",  # the fixed cap: a known number in flight
    "SHED_MAX_INFLIGHT": "4",
    "DB_POOL_MAX": "3",
    "REQUEST_DEADLINE_SECONDS": "3",
}
REPORT: list[str] = []


@dataclass
class Stack:
    pg: OwnPostgres
    redis: OwnRedis
    replicas: Replicas
    monitoring: Monitoring
    world: World

    def mcp(self, session: aiohttp.ClientSession, i: int) -> Mcp:
        return Mcp(session, self.replicas.url(i) + "/mcp")


async def _seed(dsn: str, replicas: Replicas) -> World:
    cfg = Config.from_env({**replicas.env, "ELOVA_PORT": str(replicas.ports[0])})
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await migrate(conn)
        return await build_world(pool, TokenService(cfg))
    finally:
        await pool.close()


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    pg = OwnPostgres().init()
    redis = OwnRedis().start()
    replicas = Replicas(pg.dsn, replicas=2, env={**ENV, "REDIS_URL": redis.url}, metrics=True)
    monitoring = Monitoring(replicas.metrics_ports)
    try:
        world = asyncio.run(_seed(pg.dsn, replicas))
        replicas.start()
        monitoring.start()
        yield Stack(pg, redis, replicas, monitoring, world)
    finally:
        monitoring.stop()
        replicas.stop()
        redis.kill()
        pg.destroy()
        print("\n" + "\n".join(REPORT))


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as s:
        yield s


@contextlib.asynccontextmanager
async def traffic(stack: Stack, session: aiohttp.ClientSession) -> AsyncIterator[None]:
    """Steady tool calls on both replicas (the denominator of every ratio rule). Answers
    are not checked: incidents make them fail, and that is what the rules must see."""
    granted = stack.world.approvals["a"]
    arguments = {"workspaceId": str(granted.workspaces[0]), "limit": 5}

    async def one(i: int) -> None:
        mcp = stack.mcp(session, i)
        while True:
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                await mcp.call(granted.token, "get_many_executions", arguments)
            await asyncio.sleep(0.2)  # about 5 calls a second a replica

    tasks = [asyncio.create_task(one(i)) for i in (0, 1)]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _quiet(stack: Stack, session: aiohttp.ClientSession, alerts: list[str]) -> None:
    """Wait until none of `alerts` is pending or firing (left over from an earlier test)."""

    async def quiet() -> bool:
        if set(alerts) & set(await stack.monitoring.firing(session)):
            return False
        pending = [await stack.monitoring.pending_since(session, a) for a in alerts]
        return all(p is None for p in pending)

    await eventually(quiet, 60, f"{alerts} quiet before the induction")


def _report(seen: dict[str, Seen]) -> None:
    for path in seen.values():
        REPORT.append(path.line())
        print(path.line())


@pytest.mark.timeout(60)
async def test_every_dashboard_panel_shows_data_under_load(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    a, b = stack.world.approvals["a"], stack.world.approvals["b"]
    calls = [
        ("get_many_workspaces", {}),
        ("get_workspace", {"workspaceId": "WS"}),
        ("get_many_executions", {"workspaceId": "WS"}),
        ("get_execution_stats", {"workspaceId": "WS", "period": "7d", "timeZone": "UTC"}),
        ("get_many_workflows", {"workspaceId": "WS"}),
        ("get_workspace", {"workspaceId": "not-a-uuid"}),  # VALIDATION_ERROR
        ("get_execution", {"workspaceId": "WS", "executionId": NO_SUCH}),  # NOT_FOUND
    ]
    deadline = time.monotonic() + 10

    async def worker(i: int, token: str, workspace: str) -> None:
        mcp = stack.mcp(session, i)
        while time.monotonic() < deadline:
            name, args = random.choice(calls)
            args = {k: (workspace if v == "WS" else v) for k, v in args.items()}
            await mcp.call(token, name, args)
            await asyncio.sleep(0.05)

    async def refused(i: int) -> None:  # a missing, a malformed and a forged token
        mcp = stack.mcp(session, i)
        while time.monotonic() < deadline:
            for token in (None, "not-a-token", _forged(a.token)):
                await mcp.post(modern_body("tools/list"), modern_headers(token, "tools/list"))
            await asyncio.sleep(0.3)

    async def refresh() -> None:  # the token endpoint: tokens issued by grant
        form = {"grant_type": "refresh_token", "refresh_token": a.refresh_token,
                "client_id": str(a.approval.client_id)}  # fmt: skip
        async with session.post(stack.replicas.url(0) + "/token", data=form) as resp:
            assert resp.status == 200, await resp.text()

    workers = [worker(i, g.token, str(g.workspaces[0])) for i in (0, 1) for g in (a, b)]
    await asyncio.gather(*workers, refused(0), refused(1), refresh())
    await asyncio.sleep(3)  # a few more scrapes and evaluations
    empty: list[str] = []
    incident_only: list[str] = []
    for panel in dash.panels():
        for expr in dash.panel_queries(panel):
            result = await stack.monitoring.query(session, expr)
            if not result:
                (incident_only if dash.incident_only(panel) else empty).append(
                    f"{panel['title']}: {expr}"
                )
    total = len(dash.queries())
    shown = total - len(empty) - len(incident_only)
    REPORT.append(f"dashboard: {shown}/{total} queries returned data under load; "
                  f"incident-only panels without data then: {incident_only}")  # fmt: skip
    assert not empty, f"panels without data (mark incident-only ones): {empty}"


def _forged(token: str) -> str:
    """The token with its signature altered: refused for `signature`."""
    head, payload, sig = token.split(".")
    swapped = "A" * 8 if not sig.startswith("AAAAAAAA") else "B" * 8
    return f"{head}.{payload}.{swapped}{sig[8:]}"


@pytest.mark.timeout(60)
async def test_redis_killed_fires_limiter_degraded(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    alerts = ["ElovaMcpLimiterDegraded"]
    await _quiet(stack, session, alerts)
    async with traffic(stack, session):
        cause = time.time()
        stack.redis.kill()
        try:
            seen = await stack.monitoring.wait_firing(session, alerts, cause, 30)
            await _assert_panel_data(stack, session, "Redis p99 latency and errors")
        finally:
            stack.redis.start()
        await stack.monitoring.wait_resolved(session, seen, time.time(), 30)
    _report(seen)


@pytest.mark.timeout(60)
async def test_forged_token_flood_fires_token_verification_failing(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    alerts = ["ElovaMcpTokenVerificationFailing"]
    await _quiet(stack, session, alerts)
    forged = _forged(stack.world.approvals["a"].token)
    stop = asyncio.Event()

    async def flood(i: int) -> None:
        mcp = stack.mcp(session, i)
        while not stop.is_set():
            reply = await mcp.post(modern_body("tools/list"), modern_headers(forged, "tools/list"))
            assert reply.status == 401, reply.body[:200]
            await asyncio.sleep(0.05)

    async with traffic(stack, session):
        cause = time.time()
        flooding = asyncio.gather(flood(0), flood(1))
        try:
            seen = await stack.monitoring.wait_firing(session, alerts, cause, 40)
        finally:
            stop.set()
            await flooding
        await stack.monitoring.wait_resolved(session, seen, time.time(), 30)
    _report(seen)


@pytest.mark.timeout(60)
async def test_killed_replicas_fire_target_down_then_absent(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    replicas = stack.replicas
    await _quiet(stack, session, ["ElovaMcpTargetDown", "ElovaMcpTargetAbsent"])
    cause = time.time()
    replicas.signal(1, signal.SIGKILL)
    seen = await stack.monitoring.wait_firing(session, ["ElovaMcpTargetDown"], cause, 20)
    second = time.time()
    replicas.signal(0, signal.SIGKILL)
    absent = await stack.monitoring.wait_firing(session, ["ElovaMcpTargetAbsent"], second, 20)
    for i in (0, 1):
        replicas.procs[i].wait(timeout=10)
        replicas.restart(i)
    back = time.time()
    for i in (0, 1):
        await wait_live(session, replicas.url(i))
    seen |= absent
    await stack.monitoring.wait_resolved(session, seen, back, 30)
    _report(seen)


@pytest.mark.timeout(90)
async def test_postgresql_stopped_fires_errors_and_the_fast_budget_burn(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    alerts = ["ElovaMcpPostgresqlErrors", "ElovaMcpAvailabilityBudgetBurnFast"]
    await _quiet(stack, session, alerts)
    async with traffic(stack, session):
        cause = time.time()
        await asyncio.to_thread(stack.pg.stop, "fast")
        try:
            seen = await stack.monitoring.wait_firing(session, alerts, cause, 30)
            for i in (0, 1):  # readiness follows PostgreSQL
                async with session.get(stack.replicas.url(i) + "/readyz") as resp:
                    assert resp.status == 503
        finally:
            await asyncio.to_thread(stack.pg.start)
        removed = time.time()
        # The slow burn is a ticket on the 1-day and 6-hour windows: it fires from the same
        # outage, and stays until the 6-hour window (6 minutes here) forgets it.
        slow = await stack.monitoring.wait_firing(
            session, ["ElovaMcpAvailabilityBudgetBurnSlow"], cause, 45
        )
        await stack.monitoring.wait_resolved(session, seen, removed, 60)
    _report(seen | slow)


@contextlib.asynccontextmanager
async def locked_workspaces(stack: Stack) -> AsyncIterator[None]:
    """Every tool call waits on this lock after admission (get_workspace and the listing
    tools read `workspaces`), holding its slot, its place in flight and a pool connection,
    until the request deadline (3 s) answers DEADLINE_EXCEEDED."""
    conn = await asyncpg.connect(stack.pg.dsn)
    try:
        lock = conn.transaction()
        await lock.start()
        await conn.execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE")
        try:
            yield
        finally:
            await lock.rollback()
    finally:
        await conn.close()


async def _callers(
    stack: Stack, session: aiohttp.ClientSession, count: int, stop: asyncio.Event
) -> None:
    """`count` clients calling get_workspace in a loop, spread over both replicas."""
    granted = stack.world.approvals["a"]
    arguments = {"workspaceId": str(granted.workspaces[0])}

    async def caller(i: int) -> None:
        mcp = stack.mcp(session, i)
        while not stop.is_set():
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                reply = await mcp.call(granted.token, "get_workspace", arguments)
                if reply.status in (429, 503):
                    await asyncio.sleep(0.05)

    await asyncio.gather(*(caller(i % 2) for i in range(count)))


@pytest.mark.timeout(120)
async def test_slow_postgresql_fires_the_latency_burn_and_postgresql_slow(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    alerts = ["ElovaMcpLatencyBudgetBurnFast", "ElovaMcpPostgresqlSlow"]
    await _quiet(stack, session, alerts)
    stop = asyncio.Event()
    async with traffic(stack, session), locked_workspaces(stack):
        # 4 callers and the steady traffic's 2: within the global limit (6) and under the
        # shedding cap (4 a replica), so every call is admitted, and slow.
        cause = time.time()
        calling = asyncio.create_task(_callers(stack, session, 4, stop))
        try:
            # The 1 h window (60 s here) must hold 14.4% slow calls: about 20 s of them.
            seen = await stack.monitoring.wait_firing(session, alerts, cause, 70)
            await _assert_panel_data(stack, session, "p99 latency by tool", above=0.25)
            # The slow burn (a ticket) fires from the same slowness; like the availability
            # one it stays until its 6-hour window (6 minutes here) forgets it.
            slow = await stack.monitoring.wait_firing(
                session, ["ElovaMcpLatencyBudgetBurnSlow"], cause, 30
            )
        finally:
            stop.set()
            await calling
    async with traffic(stack, session):
        await stack.monitoring.wait_resolved(session, seen, time.time(), 60)
    _report(seen | slow)


@pytest.mark.timeout(90)
async def test_overload_fires_shedding_saturation_and_pool_exhaustion(
    stack: Stack, session: aiohttp.ClientSession
) -> None:
    alerts = ["ElovaMcpLoadShedding", "ElovaMcpGlobalLimitSaturated", "ElovaMcpDbPoolExhausted"]
    await _quiet(stack, session, alerts)
    stop = asyncio.Event()
    async with traffic(stack, session):
        async with locked_workspaces(stack):
            # 12 callers: 3 admitted a replica (the global limit) hold all 3 connections of
            # its pool; the rest get 429 (global) after the wait or, at 4 in flight on a
            # replica, a shed 503.
            cause = time.time()
            calling = asyncio.create_task(_callers(stack, session, 12, stop))
            try:
                seen = await stack.monitoring.wait_firing(session, alerts, cause, 45)
                await _assert_panel_data(stack, session, "Shed and paced refusals per second")
            finally:
                stop.set()
                await calling
        await stack.monitoring.wait_resolved(session, seen, time.time(), 60)
    _report(seen)


async def _assert_panel_data(
    stack: Stack, session: aiohttp.ClientSession, title: str, above: float = 0
) -> None:
    """The panel on call would look at shows the incident: some series above `above`."""
    (panel,) = [p for p in dash.panels() if p["title"] == title]
    values = []
    for expr in dash.panel_queries(panel):
        values += [float(r["value"][1]) for r in await stack.monitoring.query(session, expr)]
    assert any(v > above for v in values), f"{title}: nothing above {above} in the incident"
