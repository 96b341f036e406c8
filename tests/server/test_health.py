"""Liveness, readiness against real dependency outages, and the drain on shutdown."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import pytest
from aiohttp import web

from service.app import create_app
from service.app_keys import DB_POOL, METRICS
from service.config import Config
from service.server.health import begin_drain
from service.server.listener import drain
from tests.support.serve_process import ServeProcess
from tests.support.served_app import StartApp, scrape, value
from tests.support.services import REDIS_URL, TestDatabase
from tests.support.tcp_proxy import TcpProxy


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)
    host = f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host))


@pytest.fixture
async def pg_proxy(test_database: TestDatabase) -> AsyncIterator[TcpProxy]:
    target = urlsplit(test_database.dsn)
    proxy = await TcpProxy(target.hostname or "127.0.0.1", target.port or 5432).start()
    yield proxy
    await proxy.cut()


@pytest.fixture
async def redis_proxy() -> AsyncIterator[TcpProxy]:
    target = urlsplit(REDIS_URL)
    proxy = await TcpProxy(target.hostname or "127.0.0.1", target.port or 6379).start()
    yield proxy
    await proxy.cut()


async def test_livez_answers_from_the_process_alone(start_app: StartApp) -> None:
    client = await start_app()
    resp = await client.get("/livez")
    assert resp.status == 200
    assert await resp.json() == {"status": "ok"}


async def test_the_probes_answer_on_the_metrics_listener_too(start_app: StartApp) -> None:
    """Issue 54: where client connections cannot crowd them out, with the main app's state."""
    client = await start_app()
    port = client.app[METRICS].listen_port
    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/livez") as live:
            assert (live.status, await live.json()) == (200, {"status": "ok"})
        async with session.get(f"http://127.0.0.1:{port}/readyz") as ready:
            assert ready.status == 200
            assert await ready.json() == {"status": "ready", "postgresql": "ok", "redis": "ok"}
        begin_drain(client.app)
        async with session.get(f"http://127.0.0.1:{port}/readyz") as ready:
            assert (ready.status, await ready.json()) == (503, {"status": "draining"})


async def test_ready_when_postgresql_and_redis_answer(start_app: StartApp) -> None:
    client = await start_app()
    resp = await client.get("/readyz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ready", "postgresql": "ok", "redis": "ok"}


async def test_ready_without_redis_configured(start_app: StartApp) -> None:
    client = await start_app(REDIS_URL=None)
    resp = await client.get("/readyz")
    assert resp.status == 200
    assert (await resp.json())["redis"] == "not_configured"


async def test_redis_outage_degrades_but_stays_ready(
    start_app: StartApp, redis_proxy: TcpProxy
) -> None:
    client = await start_app(REDIS_URL=_via(REDIS_URL, redis_proxy.port))
    assert (await (await client.get("/readyz")).json())["redis"] == "ok"
    await redis_proxy.cut()
    resp = await client.get("/readyz")
    assert resp.status == 200
    assert await resp.json() == {"status": "ready", "postgresql": "ok", "redis": "degraded"}
    text = await scrape(client)
    assert value(text, "elova_mcp_redis_call_errors_total", operation="health") == 1
    await redis_proxy.restore()
    assert (await (await client.get("/readyz")).json())["redis"] == "ok"


async def test_postgresql_outage_fails_readiness_not_liveness(
    start_app: StartApp, pg_proxy: TcpProxy, test_database: TestDatabase
) -> None:
    client = await start_app(DATABASE_URL=_via(test_database.dsn, pg_proxy.port))
    assert (await client.get("/readyz")).status == 200
    await pg_proxy.cut()
    started = time.monotonic()
    resp = await client.get("/readyz")
    assert resp.status == 503
    assert (await resp.json())["postgresql"] == "unavailable"
    assert time.monotonic() - started < 3, "a readiness probe must answer within its timeout"
    assert (await client.get("/livez")).status == 200
    text = await scrape(client)
    assert value(text, "elova_mcp_db_call_errors_total", operation="health") == 1
    # The pool reconnects by itself once PostgreSQL is back.
    await pg_proxy.restore()
    for _ in range(20):
        if (await client.get("/readyz")).status == 200:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("readiness did not come back after PostgreSQL returned")


async def test_drain_fails_readiness_first_then_finishes_in_flight_requests(
    make_config: Callable[..., Config],
) -> None:
    cfg = make_config(METRICS_PORT="0")
    app = create_app(cfg)
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"finished": True})

    app.router.add_get("/test-slow", slow)
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    base = f"http://127.0.0.1:{port}"
    pool = app[DB_POOL]
    async with aiohttp.ClientSession() as session:
        in_flight = asyncio.create_task(session.get(f"{base}/test-slow"))
        await asyncio.sleep(0.1)
        draining = asyncio.create_task(drain(app, runner, 0.6, asyncio.Event()))
        await asyncio.sleep(0.1)
        # Readiness fails at once; the listener still serves while load balancers notice.
        ready = await session.get(f"{base}/readyz")
        assert ready.status == 503
        assert await ready.json() == {"status": "draining"}
        assert ready.headers.get("Connection", "").lower() == "close"
        assert (await session.get(f"{base}/livez")).status == 200
        metrics_text = await _scrape_port(session, app[METRICS].listen_port)
        assert value(metrics_text, "elova_mcp_draining") == 1
        await asyncio.sleep(0.7)  # the drain window is over: the listener is closed
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"{base}/livez")
        assert not draining.done(), "shutdown must wait for the in-flight request"
        assert not pool._closed  # the pool outlives in-flight requests
        release.set()
        resp = await in_flight
        assert resp.status == 200
        assert await resp.json() == {"finished": True}
        await asyncio.wait_for(draining, 5)
    assert pool._closed


async def test_sigterm_drains_a_real_process(serve_env: dict[str, str]) -> None:
    async with ServeProcess(serve_env) as proc:
        assert (await proc.get("/readyz")).status == 200
        proc.terminate()
        statuses = []
        for _ in range(20):
            try:
                statuses.append((await proc.get("/readyz")).status)
            except aiohttp.ClientConnectionError:
                break
            await asyncio.sleep(0.25)
        # The signal lands asynchronously; from the first 503 on, readiness never recovers
        # while the listener keeps answering until the drain window ends.
        assert 503 in statuses, statuses
        assert set(statuses[statuses.index(503) :]) == {503}, statuses
        assert statuses.count(503) >= 10, "the listener should serve through the drain window"
        assert await proc.wait(timeout=15) == 0
        lines = proc.log_lines()
    messages = [line["message"] for line in lines]
    assert "draining: readiness fails, in-flight requests finish" in messages
    assert messages[-1] == "stopped"


async def _scrape_port(session: aiohttp.ClientSession, port: int | None) -> str:
    async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        return await resp.text()


async def test_an_unmigrated_database_is_not_ready(serve_env: dict[str, str]) -> None:
    """Issue 42, item 9: `serve` against a database `migrate` never ran on answers /readyz
    503 naming the schema, and ready once `migrate` ran."""
    import asyncpg

    from service.store.migrate import migrate

    admin = await asyncpg.connect(serve_env["ELOVA_DATABASE_URL"])
    name = f"elova_unmigrated_{int(time.time() * 1000)}"
    await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    await admin.close()
    parts = urlsplit(serve_env["ELOVA_DATABASE_URL"])
    dsn = urlunsplit(parts._replace(path=f"/{name}"))
    try:
        async with ServeProcess({**serve_env, "ELOVA_DATABASE_URL": dsn}) as proc:
            resp = await proc.get("/readyz")
            assert resp.status == 503
            body = await resp.json()
            assert body["status"] == "not_ready" and body["schema"] == "not_migrated", body
            conn = await asyncpg.connect(dsn)
            try:
                await migrate(conn)
            finally:
                await conn.close()
            resp = await proc.get("/readyz")
            assert resp.status == 200, await resp.json()
            assert "schema" not in await resp.json()
    finally:
        admin = await asyncpg.connect(serve_env["ELOVA_DATABASE_URL"])
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()
