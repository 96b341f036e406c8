"""The same-answer ceiling: the least work that produces our exact answer.

    python -m tests.bench.same_answer --port P --dsn DSN --approval UUID   # ELOVA_SIGNING_KEY set

A bare aiohttp POST handler (no MCP envelope checks, no authorization, no limits) that
answers a stateless (2026-07-28) `tools/call get_many_executions` first page, period `all`,
with the bytes our service answers: the JSON-RPC result holding `structuredContent` and the
text block, encoded by msgspec with the service's own Structs and joined as our tool joins
them (service.mcp.protocol.success_body: the same least work for the same bytes; until
2026-12-06 the ceiling decoded the page to a str and encoded it again for its text block,
~0.3M instructions a call more than ours on this data set's non-ASCII pages). Each request runs the
statement our tool runs for that call — the approval, scope and page read in one
(service.store.reads.executions.read_first_page, the same function) —
through a pool of our pool's size and settings, and shapes the rows, the coverage, `asOf`
and the sealed `nextCursor` as the tool does. What it leaves out is everything that is not
the answer: parsing and checking the envelope and headers, the bearer token and the
approval's verdict, admission, metrics and the request log.

`compare` checks once that both servers answer the same request with the same bytes
(`asOf` and `nextCursor` carry the instant of the call and a random nonce, so they are
compared by what they hold: the cursors are opened and their positions compared).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec
from aiohttp import web

from service.auth.caller import Caller
from service.cli.serve import event_loop_factory, tune_gc
from service.mcp import protocol as p
from service.mcp.rpc import modern_meta
from service.rules.shaping import format_local, resolve_zone
from service.store.reads.executions import FIRST_PAGE_PARAMETER, page_query, read_first_page
from service.tools.coverage import coverage_of
from service.tools.cursors import CursorCodec, derive_cursor_key
from service.tools.executions import ManyExecutions, shape_row
from tests.bench.loadgen import Request
from tests.bench.reference import Pool

TOOL = "get_many_executions"
PERIOD = "all"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class _Arguments(msgspec.Struct):
    workspaceId: str
    limit: int = 50


class _Params(msgspec.Struct):
    arguments: _Arguments


class _Call(msgspec.Struct):
    id: int | str
    params: _Params


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


class SameAnswer:
    """The handler's state: the pool, the statement texts, the cursor codec."""

    def __init__(self, dsn: str, approval_id: UUID, signing_key_pem: bytes) -> None:
        self.pool = Pool(dsn)
        self.approval_id = approval_id
        self.cursors = CursorCodec(derive_cursor_key(signing_key_pem))
        self.page_statements: dict[int, str] = {}
        self.decode = msgspec.json.Decoder(_Call).decode
        self.encode = msgspec.json.Encoder().encode
        self.meta = modern_meta()

    def page_statement(self, limit: int) -> str:
        """Our tool's page statement for a first page of `limit` rows, period all."""
        known = self.page_statements.get(limit)
        if known is None:
            known, _ = page_query({}, limit + 1, first=FIRST_PAGE_PARAMETER)
            self.page_statements[limit] = known
        return known

    async def handle(self, request: web.Request) -> web.Response:
        call = self.decode(await request.read())
        args = call.params.arguments
        workspace_id = UUID(args.workspaceId)
        limit = args.limit
        pool = await self.pool.get()
        async with pool.acquire() as conn:
            head, page = await read_first_page(
                conn, workspace_id, None, None, self.approval_id, self.page_statement(limit), []
            )
        as_of = datetime.now(UTC)
        assert head is not None, "the bench approval exists"
        more = len(page) > limit
        page = page[:limit]
        zone_name = head["time_zone"]
        next_cursor = None
        if more:
            caller = Caller.build(
                account_id=head["account_id"],
                approval_id=self.approval_id,
                generation=head["generation"],
                client_id=head["client_id"],
                scopes=frozenset(head["scopes"]),
                eligible=dict(zip(head["workspace_ids"], head["roles"], strict=True)),
            )
            filters = [str(workspace_id), None, None, None, PERIOD, None]
            binding = self.cursors.binding(TOOL, caller, filters, limit)
            last = page[-1]
            position = [_micros(as_of), None, last["sort_us"], last["id"].bytes]
            next_cursor = self.cursors.issue(binding, head["read_generation"], position)
        output = ManyExecutions(
            workspaceId=str(workspace_id),
            period=PERIOD,
            timeZone=zone_name,
            asOf=format_local(as_of, resolve_zone(zone_name)),
            executions=[shape_row(r) for r in page],
            nextCursor=next_cursor,
            coverage=coverage_of(
                head["first_observed"],
                head["last_sync"],
                head["executions_truncated"],
                head["workflows_truncated"],
            ),
        )
        body = p.success_body(call.id, self.encode(output), self.meta)
        return web.Response(body=body, content_type="application/json")


def run(port: int, dsn: str, approval_id: UUID) -> None:
    pem = os.environ["ELOVA_SIGNING_KEY"].encode()
    server = SameAnswer(dsn, approval_id, pem)
    app = web.Application()
    app.router.add_post("/mcp", server.handle)
    tune_gc()
    loop_factory = event_loop_factory()
    loop = loop_factory() if loop_factory is not None else None
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, loop=loop)


# --- the check that both answer the same bytes ---------------------------------------------

_AS_OF = re.compile(rb'(\\?"asOf\\?":\\?")[^"\\]*(\\?")')
_CURSOR = re.compile(rb'(\\?"nextCursor\\?":\\?")([A-Za-z0-9_-]*)(\\?")')


def post(port: int, request: Request) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", request.path, body=request.body.encode(), headers=request.headers)
        answer = conn.getresponse()
        body = answer.read()
        if answer.status != 200:
            raise RuntimeError(f"{port} answered {answer.status}: {body[:300]!r}")
        return body
    finally:
        conn.close()


def _cursor_position(codec: CursorCodec, body: bytes, binding: bytes) -> list[Any] | None:
    found = _CURSOR.search(body)
    if found is None or not found.group(2):
        return None
    state = codec.open(found.group(2).decode(), binding)
    return [state.read_generation, *state.position[1:]]  # position[0]: the call's asOf


def compare(ours: bytes, ceiling: bytes, codec: CursorCodec, binding: bytes) -> str:
    """'same bytes …' when the two answers are equal but for the instant of the call and
    the cursor's nonce (and the cursors hold the same position), else what differs."""

    def masked(body: bytes) -> bytes:
        return _CURSOR.sub(rb"\1CURSOR\3", _AS_OF.sub(rb"\1AS_OF\2", body))

    a, b = masked(ours), masked(ceiling)
    if a != b:
        at = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), len(a))
        return (
            f"DIFFERENT ({len(ours)} vs {len(ceiling)} bytes; first difference at byte {at}: "
            f"{a[max(0, at - 60) : at + 60]!r} vs {b[max(0, at - 60) : at + 60]!r})"
        )
    here, there = _cursor_position(codec, ours, binding), _cursor_position(codec, ceiling, binding)
    if here != there:
        return f"DIFFERENT cursors: {here} vs {there}"
    return (
        f"same bytes ({len(ours)} bytes; asOf and the nextCursor nonce aside, the cursors "
        "open to the same position)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.same_answer")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--approval", type=UUID, required=True)
    args = parser.parse_args()
    run(args.port, args.dsn, args.approval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
