"""Issue 4's check: three `elova-mcp serve` replicas sharing one Redis, many clients.

The probe for "in flight": the test holds an ACCESS EXCLUSIVE lock on `workspaces`, so every
admitted `get_many_workspaces` call blocks inside PostgreSQL (the bearer check reads other
tables and passes). The number of backends waiting on that lock, sampled every 10 ms, is the
number of requests in flight across all replicas; it must never exceed the cap. Refused
calls answer at once with 429.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest

from service.config import Config
from tests.limits.conftest import RedisServer, free_port
from tests.support.mcp_wire import tool_call
from tests.support.services import REDIS_URL, TestDatabase

# leases and budgets across processes, timed: run with no other test beside
pytestmark = [pytest.mark.slow, pytest.mark.alone]

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_URL = "http://127.0.0.1:8080"  # one audience for every replica (docs/limits.md)
DEADLINE, GRACE, PER_MINUTE = 5, 1, 5
LEASE_SECONDS = DEADLINE + GRACE
REPLICAS = 3


def _serving_tools() -> str | None:
    """Why the full server cannot answer tools/call yet, or None when it can."""
    try:
        from service.mcp import transport  # noqa: F401
        from service.tools.setup import all_tools
    except ImportError as err:
        return f"service.mcp cannot serve tools yet ({err})"
    if "get_many_workspaces" not in all_tools():
        return "get_many_workspaces is not registered yet"
    return None


@pytest.fixture(autouse=True)
def _needs_transport() -> None:
    reason = _serving_tools()
    if reason is not None:
        pytest.skip(reason)


@dataclass
class Client:
    """One approval of one account, with its access token."""

    account_id: uuid.UUID
    approval_id: uuid.UUID
    token: str


class Seeder:
    """Accounts, workspaces and approvals in the run's database, tokens for the replicas."""

    def __init__(self, conn: asyncpg.Connection, cfg: Config) -> None:
        from service.auth.tokens import TokenService

        self.conn = conn
        self.tokens = TokenService(cfg)

    async def account(self, approvals: int = 1) -> list[Client]:
        from service.auth.approvals import create_operator_client, grant_approval, issue_tokens

        account_id, workspace_id = uuid.uuid4(), uuid.uuid4()
        conn = self.conn
        await conn.execute(
            "INSERT INTO accounts (id, email, name) VALUES ($1, $2, 'Limits')",
            account_id,
            f"limits-{account_id.hex}@example.com",
        )
        await conn.execute(
            "INSERT INTO workspaces (id, name, time_zone) VALUES ($1, 'Limits', 'UTC')",
            workspace_id,
        )
        await conn.execute(
            "INSERT INTO memberships (account_id, workspace_id, role) VALUES ($1, $2, 'owner')",
            account_id,
            workspace_id,
        )
        out = []
        for _ in range(approvals):
            client_id = await create_operator_client(conn, "limits test")
            approval = await grant_approval(
                conn,
                account_id=account_id,
                client_id=client_id,
                workspace_ids=[workspace_id],
                scopes="workspaces:read n8n:read",
                expires="1d",
            )
            issued = await issue_tokens(conn, self.tokens, approval)
            out.append(Client(account_id, approval.id, issued.access_token))
        return out


class Replica:
    def __init__(self, env: dict[str, str]) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        self.env = {
            **os.environ,
            **env,
            "ELOVA_PORT": str(self.port),
            "ELOVA_METRICS_PORT": str(self.metrics_port),
        }
        self.log = Path(tempfile.mkstemp(prefix="elova-limits-", suffix=".log")[1])
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> None:
        exe = Path(sys.executable).with_name("elova-mcp")
        cmd = [str(exe), "serve"] if exe.exists() else [sys.executable, "-m", "service", "serve"]
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                cmd, env=self.env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT
            )

    async def ready(self, http: aiohttp.ClientSession) -> None:
        assert self.proc is not None
        for _ in range(200):
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{self.log.read_text()}")
            try:
                async with http.get(f"http://127.0.0.1:{self.port}/livez") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.05)
        raise RuntimeError(f"serve did not start:\n{self.log.read_text()}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    async def metric(self, http: aiohttp.ClientSession, name: str) -> float | None:
        async with http.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]
    replica: int


class Cluster:
    def __init__(self, replicas: list[Replica], http: aiohttp.ClientSession) -> None:
        self.replicas = replicas
        self.http = http

    async def call(self, client: Client, replica: int) -> Answer:
        body, headers = tool_call(
            "get_many_workspaces", {}, token=client.token, client="limits-test"
        )
        async with self.http.post(self.replicas[replica].url, json=body, headers=headers) as resp:
            return Answer(resp.status, dict(resp.headers), await resp.json(), replica)


@pytest.fixture
def seed_config(make_config: Callable[..., Config]) -> Config:
    return make_config(PUBLIC_URL=PUBLIC_URL)


@pytest.fixture
async def seeder(test_database: TestDatabase, seed_config: Config) -> AsyncIterator[Seeder]:
    conn = await asyncpg.connect(test_database.dsn)
    yield Seeder(conn, seed_config)
    await conn.close()


@pytest.fixture
def replica_env(
    test_database: TestDatabase, signing_key_pem: bytes, key_prefix: str
) -> dict[str, str]:
    return {
        "ELOVA_DATABASE_URL": test_database.dsn,
        "ELOVA_SIGNING_KEY": signing_key_pem.decode(),
        "ELOVA_REDIS_URL": REDIS_URL,
        "ELOVA_REDIS_KEY_PREFIX": key_prefix,
        "ELOVA_PUBLIC_URL": PUBLIC_URL,
        "ELOVA_DB_POOL_MIN": "1",
        "ELOVA_LOG_LEVEL": "WARNING",
        "ELOVA_LIMIT_APPROVAL_PER_MINUTE": str(PER_MINUTE),
        "ELOVA_REQUEST_DEADLINE_SECONDS": str(DEADLINE),
        "ELOVA_LEASE_GRACE_SECONDS": str(GRACE),
        "ELOVA_EXPECTED_REPLICAS": str(REPLICAS),
    }


@asynccontextmanager
async def cluster(env: dict[str, str], count: int = REPLICAS) -> AsyncIterator[Cluster]:
    replicas = [Replica(env) for _ in range(count)]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        try:
            for r in replicas:
                r.start()
            for r in replicas:
                await r.ready(http)
            yield Cluster(replicas, http)
        finally:
            for r in replicas:
                r.kill()
                r.log.unlink(missing_ok=True)


@pytest.fixture
async def probe(test_database: TestDatabase) -> AsyncIterator[Probe]:
    p = Probe(test_database.dsn)
    await p.open()
    yield p
    await p.close()


class Probe:
    """Holds the `workspaces` lock and counts the requests blocked behind it."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.max_seen = 0
        self._locker: asyncpg.Connection | None = None
        self._counter: asyncpg.Connection | None = None
        self._lock_tx: Any = None

    async def open(self) -> None:
        self._locker = await asyncpg.connect(self.dsn)
        self._counter = await asyncpg.connect(self.dsn)

    async def close(self) -> None:
        await self.unlock()
        for conn in (self._locker, self._counter):
            if conn is not None:
                await conn.close()

    async def lock(self) -> None:
        assert self._locker is not None
        self._lock_tx = self._locker.transaction()
        await self._lock_tx.start()
        await self._locker.execute("LOCK TABLE workspaces IN ACCESS EXCLUSIVE MODE")

    async def unlock(self) -> None:
        if self._lock_tx is not None:
            await self._lock_tx.rollback()
            self._lock_tx = None

    async def in_flight(self) -> int:
        assert self._counter is not None
        count: int = await self._counter.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        self.max_seen = max(self.max_seen, count)
        return count

    async def watch(self, seconds: float) -> int:
        """Sample for `seconds`; the last count (the steady state)."""
        deadline = time.monotonic() + seconds
        count = 0
        while time.monotonic() < deadline:
            count = await self.in_flight()
            await asyncio.sleep(0.01)
        return count


def _assert_refusal(answer: Answer, limits: set[str]) -> str:
    assert answer.status == 429, answer
    data = answer.body["error"]["data"]
    assert data["limit"] in limits
    assert int(answer.headers["Retry-After"]) == data["retryAfterSeconds"] >= 1
    assert "RateLimit" in answer.headers and "RateLimit-Policy" in answer.headers
    limit: str = data["limit"]
    if limit in ("global", "account"):
        assert data["retryAfterSeconds"] in (1, 2)  # a jittered hint, never the lease time
    return limit


async def test_concurrency_caps_hold_across_replicas(
    replica_env: dict[str, str], seeder: Seeder, probe: Probe
) -> None:
    """Issue 39's check, with the default limits: `global` is per replica (4 each, 8 on
    two), the account cap (2) holds across replicas. Calls over a cap wait for a slot (2 s)
    and, the lock held longer than that, are then refused."""
    accounts = [await seeder.account(approvals=2) for _ in range(8)]
    busy = await seeder.account(approvals=2)
    hold = 2.6  # longer than the wait for a slot: the waiters are refused
    async with cluster(replica_env, count=2) as c:
        # 16 simultaneous calls from 8 accounts (2 each: within their cap), over two replicas.
        await probe.lock()
        calls = [asyncio.create_task(c.call(accounts[i // 2][i % 2], i % 2)) for i in range(16)]
        steady = await probe.watch(hold)
        await probe.unlock()
        answers = await asyncio.gather(*calls)
        assert (steady, probe.max_seen) == (8, 8)
        ok = [a for a in answers if a.status == 200]
        assert sorted(a.replica for a in ok) == [0, 0, 0, 0, 1, 1, 1, 1]
        assert all("RateLimit" in a.headers for a in ok)
        refused = [_assert_refusal(a, {"global"}) for a in answers if a.status != 200]
        assert refused == ["global"] * 8

        # One account, two approvals, 20 calls over both replicas: 2 at a time.
        probe.max_seen = 0
        await probe.lock()
        calls = [asyncio.create_task(c.call(busy[i % 2], i % 2)) for i in range(20)]
        steady = await probe.watch(hold)
        await probe.unlock()
        answers = await asyncio.gather(*calls)
        assert steady == 2 and probe.max_seen == 2
        assert sum(a.status == 200 for a in answers) == 2
        assert {_assert_refusal(a, {"account"}) for a in answers if a.status != 200} == {"account"}

    async with cluster(replica_env, count=1) as c:
        # One replica alone admits exactly 4.
        probe.max_seen = 0
        await probe.lock()
        calls = [asyncio.create_task(c.call(accounts[i][0], 0)) for i in range(8)]
        steady = await probe.watch(hold)
        await probe.unlock()
        answers = await asyncio.gather(*calls)
        assert (steady, probe.max_seen) == (4, 4)
        assert sum(a.status == 200 for a in answers) == 4
        assert {_assert_refusal(a, {"global"}) for a in answers if a.status != 200} == {"global"}


async def test_waiting_calls_are_answered_once_slots_free(
    replica_env: dict[str, str], seeder: Seeder, probe: Probe
) -> None:
    """An agent's parallel calls over a cap wait for a slot instead of failing: with the
    lock released within the wait, every call is answered."""
    agent = await seeder.account(approvals=1)
    async with cluster(replica_env, count=2) as c:
        await probe.lock()
        calls = [asyncio.create_task(c.call(agent[0], i % 2)) for i in range(5)]
        steady = await probe.watch(0.5)
        await probe.unlock()
        answers = await asyncio.gather(*calls)
        assert steady == 2 and probe.max_seen == 2
        assert [a.status for a in answers] == [200] * 5  # (its rate budget: 5 a minute)
        waited = sum(
            [await r.metric(c.http, 'elova_mcp_limit_slot_wait_seconds_count{outcome="admitted"}')
             or 0 for r in c.replicas]
        )  # fmt: skip
        assert waited == 3


async def test_approval_budget_holds_across_replicas(
    replica_env: dict[str, str], seeder: Seeder
) -> None:
    (client,) = await seeder.account()
    async with cluster(replica_env) as c:
        answers = [await c.call(client, i % REPLICAS) for i in range(PER_MINUTE + 4)]
    assert [a.status for a in answers[:PER_MINUTE]] == [200] * PER_MINUTE
    assert answers[PER_MINUTE - 1].headers["RateLimit"].startswith('"approval";r=0;')
    for a in answers[PER_MINUTE:]:
        assert _assert_refusal(a, {"approval"}) == "approval"
        retry = int(a.headers["Retry-After"])
        # One token every 60/5 = 12 s; the first was taken moments ago.
        assert 60 // PER_MINUTE - 3 <= retry <= 60 // PER_MINUTE
        assert a.headers["RateLimit"] == f'"approval";r=0;t={retry}'


@pytest.mark.timeout(60)  # waits out the killed replica's lease: about 9 s
async def test_sigkilled_replica_leaks_nothing_beyond_the_lease(
    replica_env: dict[str, str], seeder: Seeder, probe: Probe
) -> None:
    holders = await seeder.account(approvals=2)
    async with cluster(replica_env) as c:
        await probe.lock()
        held = [asyncio.create_task(c.call(h, 0)) for h in holders]
        assert await probe.watch(1.0) == 2
        c.replicas[0].kill()  # dies holding both of the account's slots
        killed_at = time.monotonic()
        await asyncio.gather(*held, return_exceptions=True)
        await probe.unlock()
        first = await c.call(holders[0], 1)  # waits for a slot, then refused
        assert _assert_refusal(first, {"account"}) == "account"
        recovered = None
        for i in range(20):
            answer = await c.call(holders[i % 2], 1 + i % 2)  # the two surviving replicas
            if answer.status == 200:
                recovered = time.monotonic() - killed_at
                break
            _assert_refusal(answer, {"account"})
    assert recovered is not None, "capacity never came back"
    assert recovered <= LEASE_SECONDS + 1.0


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


async def test_redis_outage_degrades_without_errors_and_recovers(
    replica_env: dict[str, str], seeder: Seeder, private_redis: RedisServer
) -> None:
    env = {**replica_env, "ELOVA_REDIS_URL": private_redis.url}
    clients = [(await seeder.account())[0] for _ in range(12)]
    degraded = "elova_mcp_limiter_degraded"
    async with cluster(env) as c:
        for i, client in enumerate(clients[:3]):
            assert (await c.call(client, i)).status == 200
        private_redis.stop()
        answers = await asyncio.gather(
            *(c.call(clients[3 + i % 6], i % REPLICAS) for i in range(36))
        )
        assert {a.status for a in answers} <= {200, 429}  # never a 5xx
        for a in answers:
            if a.status == 429:
                # Per-replica shares: 4 / 3 → 1 global slot, 2 / 3 → 1 per account.
                _assert_refusal(a, {"global", "account", "approval"})
        for replica in c.replicas:
            assert await replica.metric(c.http, degraded) == 1
            async with c.http.get(f"http://127.0.0.1:{replica.port}/readyz") as ready:
                assert ready.status == 200  # a Redis outage never makes a replica unready
        private_redis.start()
        deadline = time.monotonic() + 5
        pending = set(range(REPLICAS))
        while pending and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
            for i in list(pending):
                answer = await c.call(clients[9 + i], i)
                assert answer.status in (200, 429)
                if await c.replicas[i].metric(c.http, degraded) == 0:
                    pending.discard(i)
        assert not pending, f"replicas {pending} stayed degraded"
