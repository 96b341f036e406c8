"""The servers our service is measured against, each a process of its own:

    python -m tests.bench.reference sdk  --port P --dsn DSN   # official Python SDK
    python -m tests.bench.reference bare --port P --dsn DSN   # aiohttp + msgspec ceiling
    python -m tests.bench.reference refusal --port P          # aiohttp's floor for a 401

Both answer `get_many_executions` for a workspace (first page, `limit` rows) with the page
statement our tool runs for that call (`service.tools.executions.page_query`; our tool
embeds it in the statement that also reads the caller's approval and the scope), through an
asyncpg pool of the same size and settings as ours (no reset query on release), and shape
rows with our `shape_row`. The SDK server is an `MCPServer` tool served by its
streamable-HTTP transport in stateless JSON mode under uvicorn (no authorization, no
limits: what a user would otherwise pick). The bare server is a plain aiohttp POST handler
returning the rows encoded by msgspec: no MCP, no authorization, no limits — the least
work that produces the answer. The refusal server answers every POST with the same
precomputed 401 (its body read, a JSON-RPC error and a bearer challenge): the least an
aiohttp server spends on a refusal, the floor the flood section's CPU a refusal is read
against.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import Any, Literal
from uuid import UUID

import asyncpg
import msgspec
from aiohttp import web
from multidict import CIMultiDict

from service.cli.serve import event_loop_factory, tune_gc
from service.store.db import reset_when_needed
from service.store.reads.executions import page_query
from service.tools.executions import shape_row

POOL_SIZE = 10


class Pool:
    """One asyncpg pool, made on first use inside the server's own event loop."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pool: asyncpg.Pool | None = None
        self.lock = asyncio.Lock()

    async def get(self) -> asyncpg.Pool:
        if self.pool is None:
            async with self.lock:
                if self.pool is None:
                    # Our service's pool settings (service.store.db), above all its reset:
                    # asyncpg's default runs a reset query on every release, work the
                    # least-work ceiling must not be charged with.
                    self.pool = await asyncpg.create_pool(
                        self.dsn,
                        min_size=POOL_SIZE,
                        max_size=POOL_SIZE,
                        reset=reset_when_needed,
                        server_settings={"TimeZone": "UTC", "jit": "off"},
                    )
        assert self.pool is not None
        return self.pool


async def _page(pools: Pool, workspace_id: str, limit: int) -> list[Any]:
    pool = await pools.get()
    query, _ = page_query({}, limit + 1)
    rows = await pool.fetch(query, UUID(workspace_id))
    return [shape_row(r) for r in rows[:limit]]


def run_sdk(port: int, dsn: str) -> None:
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    pools = Pool(dsn)
    # BENCH_PEER_PROFILE=shipped: the SDK's and uvicorn's default logging (INFO, an access
    # line a request), as it ships (tests/bench/profiles_bench.py); else warnings only.
    shipped = os.environ.get("BENCH_PEER_PROFILE") == "shipped"
    level: Literal["INFO", "WARNING"] = "INFO" if shipped else "WARNING"
    server: MCPServer[Any] = MCPServer("elova-reference", log_level=level)

    @server.tool()
    async def get_many_executions(workspaceId: str, limit: int = 50) -> dict[str, Any]:
        """Retained executions of a workspace, newest first."""
        rows = await _page(pools, workspaceId, limit)
        return {"workspaceId": workspaceId, "executions": msgspec.to_builtins(rows)}

    app = server.streamable_http_app(json_response=True, stateless_http=True, host="127.0.0.1")
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level=level.lower(), access_log=shipped
    )
    asyncio.run(uvicorn.Server(config).serve())


class _Args(msgspec.Struct):
    workspaceId: str
    limit: int = 50


def run_bare(port: int, dsn: str) -> None:
    pools = Pool(dsn)
    decode = msgspec.json.Decoder(_Args).decode
    encode = msgspec.json.Encoder().encode

    async def handle(request: web.Request) -> web.Response:
        args = decode(await request.read())
        rows = await _page(pools, args.workspaceId, args.limit)
        return web.Response(body=encode({"executions": rows}), content_type="application/json")

    app = web.Application()
    app.router.add_post("/executions", handle)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # The event loop and collector settings our service runs with: the ceiling must not be
    # handicapped by runtime settings (the SDK server runs as uvicorn runs it).
    tune_gc()
    loop_factory = event_loop_factory()
    loop = loop_factory() if loop_factory is not None else None
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)


_REFUSAL = (
    b'{"jsonrpc":"2.0","id":1,"error":{"code":-32001,'
    b'"message":"Unauthorized: the access token has expired"}}'
)
_CHALLENGE = 'Bearer error="invalid_token", resource_metadata="http://127.0.0.1/.well-known/x"'


def refusal_app() -> web.Application:
    """The floor: every POST /mcp answered with one precomputed 401 (tests.bench.refusal_cost
    measures it in-process beside ours)."""

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(
            body=_REFUSAL,
            status=401,
            content_type="application/json",
            headers={"WWW-Authenticate": _CHALLENGE},
        )

    app = web.Application()
    app.router.add_post("/mcp", handle)
    return app


def run_refusal(port: int, dsn: str) -> None:
    app = refusal_app()
    tune_gc()
    loop_factory = event_loop_factory()
    loop = loop_factory() if loop_factory is not None else None
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)


# The same-work floor's answer (tests/bench/refusal_floor.py): JSON of `Answer`.
ANSWER_VARIABLE = "BENCH_FLOOR_ANSWER"


class Answer(msgspec.Struct):
    """Our server's answer to one request, byte for byte but the request id."""

    status: int
    headers: list[tuple[str, str]]
    body: str


def same_work_app(answer: Answer) -> web.Application:
    """The same-work floor: reads the body and the JSON-RPC envelope as our transport does
    (service.mcp.envelope.parse), mints a request id, and sends our exact refusal."""
    from service.edge.request_ids import new_request_id
    from service.mcp.envelope import parse

    body = answer.body.encode("utf-8")
    # aiohttp writes these itself; the request id is minted for each answer.
    own = {"content-length", "date", "server", "x-request-id"}
    fixed = [(k, v) for k, v in answer.headers if k.lower() not in own]

    async def handle(request: web.Request) -> web.Response:
        parse(await request.read(), request.headers)
        headers = CIMultiDict(fixed)
        headers["X-Request-Id"] = new_request_id()
        return web.Response(body=body, status=answer.status, headers=headers)

    app = web.Application()
    app.router.add_post("/mcp", handle)
    return app


def run_same_work(port: int, dsn: str) -> None:
    answer = msgspec.json.decode(os.environ[ANSWER_VARIABLE], type=Answer)
    app = same_work_app(answer)
    tune_gc()
    loop_factory = event_loop_factory()
    loop = loop_factory() if loop_factory is not None else None
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)


RUN = {"sdk": run_sdk, "bare": run_bare, "refusal": run_refusal, "samework": run_same_work}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.reference")
    parser.add_argument("kind", choices=tuple(RUN))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dsn", default="")
    args = parser.parse_args()
    RUN[args.kind](args.port, args.dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
