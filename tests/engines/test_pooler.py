"""The service behind Debian's PgBouncer 1.18 in transaction mode (no prepared-statement
support, no ignored startup parameters): the nine tools answer as they do on a direct
connection, the request deadline still cancels the database's work, and two processes
sharing the pooler's server connections never get each other's statements."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import CLOCK, DB_POOL, DB_READ_POOL, TOKENS
from service.config import Config
from service.store.reads import executions as reads_executions
from tests.engines.conftest import SETTLED
from tests.engines.support import NOW, call, hammer, nine_calls, seed_world, token_for
from tests.support.engines_pg import PgBouncer
from tests.support.services import TestDatabase

ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


async def _start(
    aiohttp_client: ClientFactory, make_config: Callable[..., Config], **env: Any
) -> TestClient[web.Request, web.Application]:
    app = create_app(make_config(**env))
    app[CLOCK] = lambda: NOW
    return await aiohttp_client(app)


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer without its cursor's bytes (sealed with a fresh nonce on every call)."""
    return {k: (bool(v) if k == "nextCursor" else v) for k, v in answer.items()}


def _through(bouncer: PgBouncer, db: TestDatabase, **env: Any) -> dict[str, Any]:
    return {"DATABASE_URL": bouncer.dsn(db.name), "DATABASE_POOLER": "transaction", **env}


@pytest.mark.parametrize("settings", ["per_transaction", "server"])
async def test_the_nine_tools_answer_through_the_pooler_as_they_do_directly(
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
    pgbouncer: PgBouncer,
    test_database: TestDatabase,
    settings: str,
) -> None:
    direct = await _start(aiohttp_client, make_config)
    env = _through(pgbouncer, test_database, DATABASE_POOLER_SETTINGS=settings)
    if settings == "server":
        env["DATABASE_URL"] = pgbouncer.dsn(SETTLED)
    pooled = await _start(aiohttp_client, make_config, **env)
    assert pooled.app[DB_READ_POOL] is pooled.app[DB_POOL]  # no read URL: one pool
    world = await seed_world(direct.app[DB_POOL])
    token, _ = await token_for(direct.app[DB_POOL], direct.app[TOKENS], world)
    # The pooled app describes the first-page statement itself (unnamed statements).
    reads_executions._THROUGH_POOLER.clear()
    calls = nine_calls(world)
    for rid, (tool, arguments) in enumerate(calls * 2):  # twice: described, then known
        status, through_pooler = await call(pooled, token, tool, arguments, rid)
        assert status == 200, through_pooler
        assert "isError" not in through_pooler, (tool, through_pooler)
        _, directly = await call(direct, token, tool, arguments, rid)
        assert _comparable(through_pooler) == _comparable(directly), tool
    # The first pages were served by server-side functions (plans kept through the pooler).
    made = [sql for sql in reads_executions._THROUGH_POOLER.values() if "elova_plan_" in sql]
    assert len(made) == 2, reads_executions._THROUGH_POOLER
    functions = await direct.app[DB_POOL].fetchval(
        "SELECT count(*) FROM pg_proc WHERE proname LIKE 'elova_plan_%'"
    )
    assert functions >= 2
    # The next page, from either app's cursor, is the same page.
    _, first = await call(pooled, token, "get_many_executions", calls[5][1])
    assert first["nextCursor"]
    following = {**calls[5][1], "cursor": first["nextCursor"]}
    _, second = await call(pooled, token, "get_many_executions", following)
    directly = (await call(direct, token, "get_many_executions", following))[1]
    assert _comparable(second) == _comparable(directly)
    assert second["executions"] and not {i["id"] for i in second["executions"]} & {
        i["id"] for i in first["executions"]
    }


async def test_settings_ride_on_each_transaction_and_none_on_the_session(
    make_config: Callable[..., Config], pgbouncer: PgBouncer, test_database: TestDatabase
) -> None:
    from service.store.db import create_pool

    cfg = make_config(**_through(pgbouncer, test_database, REQUEST_DEADLINE_SECONDS="4"))
    pool = await create_pool(cfg, min_size=1)
    try:
        settings = "SELECT current_setting('statement_timeout'), current_setting('jit'), "
        row = await pool.fetchrow(settings + "current_setting('TimeZone')")
        assert tuple(row or ()) == ("5s", "off", "UTC")
        async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read"):
            assert await conn.fetchval("SHOW statement_timeout") == "5s"
        # A direct session to the same server keeps its own defaults: nothing leaked.
        plain = await asyncpg.connect(test_database.dsn)
        try:
            assert await plain.fetchval("SHOW statement_timeout") == "0"
        finally:
            await plain.close()
    finally:
        await pool.close()


async def test_server_side_settings_are_checked_at_start(
    make_config: Callable[..., Config],
    pgbouncer: PgBouncer,
    test_database: TestDatabase,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ELOVA_DATABASE_POOLER_SETTINGS=server: no SET LOCAL, no transaction of the service's
    own around a statement; a server without the settings is named in a warning."""
    from service.store.db import check_server_settings, create_pool

    for url, held in ((pgbouncer.dsn(SETTLED), True), (pgbouncer.dsn(test_database.name), False)):
        cfg = make_config(**_through(pgbouncer, test_database, DATABASE_URL=url,
                                     DATABASE_POOLER_SETTINGS="server"))  # fmt: skip
        pool = await create_pool(cfg, min_size=1)
        try:
            caplog.clear()
            assert await check_server_settings(cfg, pool, "primary") is held
            assert ("statement_timeout" in caplog.text) is not held
            # No SET LOCAL: a statement sees the server's own settings.
            seen = await pool.fetchval("SELECT current_setting('statement_timeout')")
            assert seen == ("31s" if held else "0")
        finally:
            await pool.close()


@pytest.mark.alone  # a 1 s deadline answered within 3 s: no other test's load beside
@pytest.mark.parametrize("settings", ["per_transaction", "server"])
async def test_the_deadline_cancels_a_query_stuck_behind_a_lock_through_the_pooler(
    aiohttp_client: ClientFactory,
    make_config: Callable[..., Config],
    pgbouncer: PgBouncer,
    test_database: TestDatabase,
    settings: str,
) -> None:
    """Either way the cancel request stops the work at the deadline (with `server`, the
    role's 31 s statement timeout would be far too late)."""
    env = _through(
        pgbouncer, test_database, REQUEST_DEADLINE_SECONDS="1", DATABASE_POOLER_SETTINGS=settings
    )
    if settings == "server":
        env["DATABASE_URL"] = pgbouncer.dsn(SETTLED)
    pooled = await _start(aiohttp_client, make_config, **env)
    world = await seed_world(pooled.app[DB_POOL], executions=3)
    token, _ = await token_for(pooled.app[DB_POOL], pooled.app[TOKENS], world)
    locker = await asyncpg.connect(test_database.dsn)
    lock = locker.transaction()
    await lock.start()
    try:
        await locker.execute("LOCK TABLE executions IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        status, answer = await call(
            pooled, token, "get_many_executions", {"workspaceId": world.workspace}
        )
        elapsed = time.monotonic() - started
        assert status == 200 and answer["isError"] is True, answer
        assert "did not finish within 1 seconds" in answer["content"][0]["text"]
        assert elapsed < 3, elapsed
        # The stuck query is the one waiting for this transaction's lock. The service's
        # own background statements (the activity flush every second, its type lookups)
        # may be running at the moment of a look: they are not stuck behind the lock.
        waiting: list[asyncpg.Record] = []
        for _ in range(40):  # the cancel reaches the server through PgBouncer
            waiting = await locker.fetch(
                """SELECT pid, query FROM pg_stat_activity
                    WHERE datname = current_database() AND application_name = 'elova-mcp'
                      AND pg_backend_pid() = ANY(pg_blocking_pids(pid))"""
            )
            if not waiting:
                break
            await asyncio.sleep(0.05)
        running = await locker.fetch(
            """SELECT pid, state, wait_event_type, wait_event, left(query, 80) AS query
                 FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()
                  AND application_name = 'elova-mcp' AND state <> 'idle'"""
        )
        assert waiting == [], ("the stuck query kept running after the deadline", running)
    finally:
        await lock.rollback()
        await locker.close()
    # The pool's connection is usable again once the lock is gone.
    status, answer = await call(
        pooled, token, "get_many_executions", {"workspaceId": world.workspace}
    )
    assert status == 200 and len(answer["executions"]) == 3


async def _two_processes(dsn: str, pooled: bool, rounds: int) -> list[tuple[int, int, list[str]]]:
    context = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(2, mp_context=context) as executor:
        runs = [loop.run_in_executor(executor, hammer, dsn, s, rounds, pooled) for s in (0, 1)]
        return list(await asyncio.gather(*runs))


async def test_two_processes_behind_one_pooler_never_mix_statements(
    pgbouncer: PgBouncer, test_database: TestDatabase
) -> None:
    # 2 × 4 client connections on PgBouncer's 4 server connections for this database.
    rounds = 400
    results = await _two_processes(pgbouncer.dsn(test_database.name), True, rounds)
    assert results == [(rounds, 0, []), (rounds, 0, [])]


async def test_named_statements_would_mix_behind_the_same_pooler(
    pgbouncer: PgBouncer, test_database: TestDatabase
) -> None:
    """The check above has teeth: asyncpg's defaults (a per-process counter naming the
    statements) fail or answer wrongly on the same setup."""
    results = await _two_processes(pgbouncer.dsn(test_database.name), False, 200)
    assert sum(wrong + len(errors) for _, wrong, errors in results) > 0, results


async def test_a_statement_that_cannot_become_a_function_stays_as_it_is(
    test_database: TestDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    from service.store import plans

    sql = "SELECT 1 AS one, $1::int AS two -- read-only"
    conn = await asyncpg.connect(test_database.dsn, statement_cache_size=0)
    try:
        async with conn.transaction(readonly=True):  # as on a standby
            assert await plans.as_function(conn, sql) is None
        assert "cannot create its function (ReadOnlySQLTransactionError)" in caplog.text
        assert await plans.as_function(conn, sql) is None  # remembered: not tried again
        made = await plans.as_function(conn, "SELECT 2 AS one, $1::int AS two")
        assert made is not None and tuple(await conn.fetchrow(made, 5) or ()) == (2, 5)
    finally:
        await conn.close()
