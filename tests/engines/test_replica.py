"""ELOVA_DATABASE_READ_URL naming a streaming standby (a private cluster's, made by
`pg_basebackup -R`): tool reads land there, approvals and writes stay on the primary, and a
revocation takes effect on the next call while the standby's replay is paused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import CLOCK, DB_POOL, DB_READ_POOL, TOKENS
from service.config import Config
from service.store.load_snapshot import load_snapshot
from service.store.migrate import migrate
from tests.engines.support import NOW, call, nine_calls, seed_world, token_for
from tests.support.engines_pg import PgBouncer, PrivateCluster, start_pgbouncer
from tests.support.snapshots import Snapshot
from tests.support.tcp_proxy import TcpProxy

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]
DATABASE = "elova_replica"


@pytest.fixture(scope="session")
def replica_database(private_cluster: PrivateCluster) -> str:
    async def make() -> None:
        admin = await asyncpg.connect(private_cluster.primary_dsn())
        try:
            await admin.execute(f'CREATE DATABASE "{DATABASE}"')
        finally:
            await admin.close()
        conn = await asyncpg.connect(private_cluster.primary_dsn(DATABASE))
        try:
            await migrate(conn)
            written = await conn.fetchval("SELECT pg_current_wal_lsn()")
        finally:
            await conn.close()
        # The standby has the database and its schema once it replayed past them: on a slow
        # disk that takes a moment, and a test that connects before sees no such database.
        standby = await asyncpg.connect(private_cluster.standby_dsn())
        try:
            for _ in range(600):
                if await standby.fetchval("SELECT pg_last_wal_replay_lsn() >= $1", written):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the standby did not replay the new database in 30 s")
        finally:
            await standby.close()

    asyncio.run(make())
    return DATABASE


@pytest.fixture(scope="session")
def standby_bouncer(private_cluster: PrivateCluster) -> Iterator[PgBouncer]:
    bouncer = start_pgbouncer(private_cluster.standby_port)
    yield bouncer
    bouncer.stop()


@pytest.fixture
async def standby(private_cluster: PrivateCluster) -> AsyncIterator[asyncpg.Connection]:
    """A session on the standby; replay is resumed after the test whatever it did."""
    conn = await asyncpg.connect(private_cluster.standby_dsn())
    yield conn
    await conn.execute("SELECT pg_wal_replay_resume()")
    await conn.close()


async def _pause(standby: asyncpg.Connection) -> None:
    await standby.execute("SELECT pg_wal_replay_pause()")
    for _ in range(200):
        if await standby.fetchval("SELECT pg_get_wal_replay_pause_state() = 'paused'"):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the standby's replay did not pause within 10 seconds")


async def _replayed(primary: asyncpg.Pool, standby: asyncpg.Connection) -> None:
    """Wait (bounded) until the standby replayed everything the primary wrote so far."""
    lsn = await primary.fetchval("SELECT pg_current_wal_lsn()::text")
    for _ in range(200):
        if await standby.fetchval("SELECT pg_last_wal_replay_lsn() >= $1::text::pg_lsn", lsn):
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the standby did not catch up within 10 seconds")


@pytest.fixture(params=["direct", "pooler"])
async def app(
    request: pytest.FixtureRequest,
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
    private_cluster: PrivateCluster,
    replica_database: str,
) -> TestClient[web.Request, web.Application]:
    """The service with its reads on the standby: straight, or through PgBouncer in
    transaction mode (the pooler setting applies to both URLs)."""
    env: dict[str, Any] = {"DATABASE_URL": private_cluster.primary_dsn(replica_database)}
    if request.param == "pooler":
        bouncer: PgBouncer = request.getfixturevalue("standby_bouncer")
        env.update(DATABASE_READ_URL=bouncer.dsn(replica_database), DATABASE_POOLER="transaction")
    else:
        env.update(DATABASE_READ_URL=private_cluster.standby_dsn(replica_database))
    application = create_app(make_config(**env))
    application[CLOCK] = lambda: NOW
    return await aiohttp_client(application)


async def test_reads_land_on_the_standby_and_writes_on_the_primary(
    app: TestClient[web.Request, web.Application], standby: asyncpg.Connection
) -> None:
    primary, reads = app.app[DB_POOL], app.app[DB_READ_POOL]
    assert await primary.fetchval("SELECT pg_is_in_recovery()") is False
    assert await reads.fetchval("SELECT pg_is_in_recovery()") is True
    world = await seed_world(primary)
    await _replayed(primary, standby)
    await _pause(standby)
    # Written while replay is paused: the approval exists on the primary only.
    token, _ = await token_for(primary, app.app[TOKENS], world)
    for rid, (tool, arguments) in enumerate(nine_calls(world)):
        status, answer = await call(app, token, tool, arguments, rid)
        assert status == 200 and "isError" not in answer, (tool, answer)
    on_standby = await standby.fetch(
        "SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = $1", DATABASE
    )
    assert {r[0] for r in on_standby} == {"elova-mcp-read"}

    # An execution loaded now is not visible until the standby replays it.
    snap = Snapshot()
    at = "2025-01-15T23:30:00Z"
    late = snap.execution(world.instance, world.workflow, startedAt=at, createdAt=at)
    async with primary.acquire() as conn:
        await load_snapshot(conn, snap.document())
    lookup = {"workspaceId": world.workspace, "executionId": late["id"]}
    status, answer = await call(app, token, "get_execution", lookup)
    assert answer["isError"] is True and "NOT_FOUND" in str(answer), answer
    await standby.execute("SELECT pg_wal_replay_resume()")
    await _replayed(primary, standby)
    status, answer = await call(app, token, "get_execution", lookup)
    assert status == 200 and answer["execution"]["id"] == late["id"], answer


async def test_revocation_takes_effect_on_the_next_call_while_replay_is_paused(
    app: TestClient[web.Request, web.Application], standby: asyncpg.Connection
) -> None:
    primary = app.app[DB_POOL]
    world = await seed_world(primary, executions=3)
    token, approval_id = await token_for(primary, app.app[TOKENS], world)
    await _replayed(primary, standby)
    calls = nine_calls(world)
    for rid, (tool, arguments) in enumerate(calls):
        status, answer = await call(app, token, tool, arguments, rid)
        assert status == 200 and "isError" not in answer, (tool, answer)
    await _pause(standby)
    await primary.execute(
        "UPDATE approvals SET revoked_at = now() WHERE id = $1::uuid", approval_id
    )
    # The standby still holds the approval as active; no call may trust it.
    still_active = "SELECT revoked_at IS NULL FROM approvals WHERE id = $1::uuid"
    assert await app.app[DB_READ_POOL].fetchval(still_active, approval_id) is True
    for rid, (tool, arguments) in enumerate(calls):
        status, answer = await call(app, token, tool, arguments, rid)
        assert status == 401, (tool, status, answer)


async def test_readiness_follows_the_read_replica_too(
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
    private_cluster: PrivateCluster,
    replica_database: str,
) -> None:
    """Tool calls need the standby: /readyz says so when it is gone, and again when back."""
    proxy = await TcpProxy("127.0.0.1", private_cluster.standby_port).start()
    try:
        cfg = make_config(
            DATABASE_URL=private_cluster.primary_dsn(replica_database),
            DATABASE_READ_URL=f"postgresql://postgres@127.0.0.1:{proxy.port}/{replica_database}",
        )
        client = await aiohttp_client(create_app(cfg))
        assert (await client.get("/readyz")).status == 200
        await proxy.cut()
        resp = await client.get("/readyz")
        assert resp.status == 503 and (await resp.json())["postgresql"] == "unavailable"
        await proxy.restore()
        for _ in range(50):  # the pool replaces the dropped connections
            if (await client.get("/readyz")).status == 200:
                break
            await asyncio.sleep(0.1)
        assert (await client.get("/readyz")).status == 200
    finally:
        await proxy.cut()
