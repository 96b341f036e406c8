"""Issue 54: `serve` against a database `migrate` never ran refuses every route with one
503 naming `elova-mcp migrate`, in the route's own error shape (it answered /register with
a 500), logs that once, not at every probe, and serves as soon as `migrate` ran."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import asyncpg
import pytest

from service.store.migrate import migrate
from tests.support.serve_process import ServeProcess

HINT = "run `elova-mcp migrate`"
BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}
WARNING = "the database schema is not at this release's version: run `elova-mcp migrate`"


@pytest.fixture
async def empty_dsn(serve_env: dict[str, str]) -> AsyncIterator[str]:
    admin = await asyncpg.connect(serve_env["ELOVA_DATABASE_URL"])
    name = f"elova_unmigrated_{int(time.time() * 1000)}"
    await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    await admin.close()
    yield urlunsplit(urlsplit(serve_env["ELOVA_DATABASE_URL"])._replace(path=f"/{name}"))
    admin = await asyncpg.connect(serve_env["ELOVA_DATABASE_URL"])
    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    await admin.close()


async def test_every_route_refuses_with_one_clear_503(
    serve_env: dict[str, str], empty_dsn: str
) -> None:
    async with (
        ServeProcess({**serve_env, "ELOVA_DATABASE_URL": empty_dsn}) as proc,
        aiohttp.ClientSession(proc.base) as http,
    ):
        registration = {"redirect_uris": ["http://127.0.0.1:9/cb"], "client_name": "x"}
        async with http.post("/register", json=registration) as resp:
            assert resp.status == 503
            body = await resp.json()
            assert body["error"] == "temporarily_unavailable" and HINT in body["error_description"]
            assert resp.headers["Access-Control-Allow-Origin"] == "*"
        async with http.post("/token", data={"grant_type": "refresh_token"}) as resp:
            assert resp.status == 503 and (await resp.json())["error"] == "temporarily_unavailable"
        mcp = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        headers = {"Accept": "application/json, text/event-stream"}
        async with http.post("/mcp", json=mcp, headers=headers) as resp:
            assert resp.status == 503
            body = await resp.json()
            assert body["id"] is None and HINT in body["error"]["message"]
        async with http.get("/approvals", headers=BROWSER) as resp:
            assert resp.status == 503 and resp.content_type == "text/html"
            assert "elova-mcp migrate" in await resp.text()
        async with http.get("/oauth/elova.css") as resp:
            assert resp.status == 200  # the refusal page's style
        for _ in range(4):  # probes, a second apart as a kubelet sends them
            assert (await proc.get("/livez")).status == 200
            assert (await proc.get("/readyz")).status == 503
            await asyncio.sleep(1)
        async with http.post("/register", json=registration) as resp:
            assert resp.status == 503
        lines = proc.log_lines()
        warnings = [line for line in lines if line.get("message") == WARNING]
        assert len(warnings) == 1, [line.get("message") for line in lines]
        assert not [line for line in lines if line.get("status") == 500]

        conn = await asyncpg.connect(empty_dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        await asyncio.sleep(1.2)  # the refusals' reuse of the last read (1 s) runs out
        # No registration here: the suite's runs share the per-address registration burst.
        async with http.post("/token", data={"grant_type": "refresh_token"}) as resp:
            assert resp.status == 400, await resp.text()
            assert (await resp.json())["error"] == "invalid_request"
        async with http.post("/mcp", json=mcp, headers=headers) as resp:
            assert resp.status == 400  # the envelope's own check: it reached its handler
            assert HINT not in await resp.text()
        assert (await proc.get("/readyz")).status == 200
        messages = [line.get("message") for line in proc.log_lines()]
        assert messages.count("the database schema is at this release's version") == 1
