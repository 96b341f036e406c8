"""The FastMCP peer of `make bench`: `get_many_executions` (first page) as a FastMCP 2.x
server would be written by a user who picks FastMCP, run in its own venv (requirements.txt):

    PEER_PAGE_STATEMENT='SELECT …' .tools/bench-fastmcp/bin/python server.py --port P --dsn DSN

Stateless streamable HTTP with JSON responses, one uvicorn worker on uvloop + httptools, an
asyncpg pool of 10 made in the server's lifespan (our pool's settings: no reset query on
release, TimeZone UTC, jit off). The statement is the page statement our tool embeds, its
text handed over by the bench (PEER_PAGE_STATEMENT, $1 the workspace): asyncpg prepares and
caches it per connection as it does for us. Rows are shaped as our tool shapes them
(the same fields in the same order, so the `executions` array is byte for byte ours) and
returned as a dict: FastMCP sends it as structuredContent and as a JSON text block.

What it does not do that our service does: no authorization (no bearer token, approval or
scope read), no admission or limits, no metrics or request log, no coverage, asOf or
cursor in the answer. Standalone on purpose: this venv has FastMCP's `mcp` 1.x, not our
service's packages.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import asyncpg
import uvicorn
from fastmcp import FastMCP
from shaping import shape  # type: ignore[import-not-found]  # beside this file

POOL_SIZE = 10


async def _reset_when_needed(conn: asyncpg.Connection) -> None:
    """Our pool's release (service.store.db.reset_when_needed): asyncpg's default reset runs
    a reset query on every release; the SDK reference and this peer get our setting."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


def build(dsn: str, statement: str) -> FastMCP[Any]:
    pools: dict[str, asyncpg.Pool] = {}

    @contextlib.asynccontextmanager
    async def lifespan(server: FastMCP[Any]) -> AsyncIterator[None]:
        pools["main"] = await asyncpg.create_pool(
            dsn,
            min_size=POOL_SIZE,
            max_size=POOL_SIZE,
            reset=_reset_when_needed,
            server_settings={"TimeZone": "UTC", "jit": "off"},
        )
        try:
            yield
        finally:
            await pools["main"].close()

    mcp: FastMCP[Any] = FastMCP("elova-peer-fastmcp", lifespan=lifespan)

    async def get_many_executions(workspaceId: str, limit: int = 50) -> dict[str, Any]:
        """Retained executions of a workspace, newest first (first page)."""
        rows = await pools["main"].fetch(statement, UUID(workspaceId))
        return {"workspaceId": workspaceId, "executions": [shape(r) for r in rows[:limit]]}

    mcp.tool(get_many_executions)  # as @mcp.tool does
    return mcp


def main() -> int:
    parser = argparse.ArgumentParser(prog="server.py")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dsn", required=True)
    args = parser.parse_args()
    mcp = build(args.dsn, os.environ["PEER_PAGE_STATEMENT"])
    app = mcp.http_app(path="/mcp", stateless_http=True, json_response=True)
    # BENCH_PEER_PROFILE=shipped: uvicorn's defaults (INFO, an access line a request), as
    # `fastmcp run` serves; otherwise warnings only (tests/bench/profiles_bench.py).
    shipped = os.environ.get("BENCH_PEER_PROFILE") == "shipped"
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        workers=1,
        loop="uvloop",
        http="httptools",
        log_level="info" if shipped else "warning",
        access_log=shipped,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
