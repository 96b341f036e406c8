"""The session path (issue 23): `tools/call get_many_executions` (first page, 50 rows) in a
2025-11-25 session reused across calls, beside the stateless 2026-07-28 call.

Each connection of the session path opens its session once (`initialize`, then
`notifications/initialized`) and sends every call with its `Mcp-Session-Id` and
`MCP-Protocol-Version` headers, as the clients of the 2025 revisions do; the stateless path
sends the 2026-07-28 call of the other sections. Both run against ONE replica (the same
process, pools and data), in rounds that alternate the two paths under the same load (N
connections, a separate load-generator process): the report gives the ratio session ÷
stateless (target ≥ 0.9×, median of the rounds and per round), the server, PostgreSQL and
Redis CPU a call of each, and the PostgreSQL transactions a call of each.

Before the rounds, one call of each path is sent and their pages compared (the same
execution ids in the same order).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import asyncpg
import msgspec

from tests.bench import scenarios
from tests.bench.loadgen import SESSION_ID, Request, Result
from tests.bench.same_answer import post
from tests.bench.scale import (
    WARMUP_SECONDS,
    XACTS,
    Settings,
    loadavg,
    median_row,
    prepare,
    statements_per_call,
    throughput_table,
)
from tests.bench.servers import CpuAccount, job, load, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

TARGET = 0.9
TOOL = "get_many_executions"
EXPECT = '"isError":false'
STATELESS = "stateless (2026-07-28)"
SESSION = "session reused (2025-11-25, initialize once a connection)"
MAX_SECONDS = 6.0  # a run: short runs, twice the rounds (the paths alternate more often)
MIN_ROUNDS = 2  # both orders, even in a quick run
STATS_FLUSH_SECONDS = 1.5  # backends report their transactions to pg_stat_database lazily


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _exchange(
    conn: http.client.HTTPConnection, request: Request, session: str
) -> tuple[int, str, bytes]:
    headers = {k: v.replace(SESSION_ID, session) for k, v in request.headers.items()}
    conn.request("POST", request.path, body=request.body.encode(), headers=headers)
    answer = conn.getresponse()
    return answer.status, answer.getheader("Mcp-Session-Id") or "", answer.read()


def session_answer(port: int, opening: list[Request], call: Request) -> bytes:
    """One call in a session of its own, opened as the load generator opens it."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        session = ""
        for request in opening:
            status, named, body = _exchange(conn, request, session)
            if status not in (200, 202):
                raise RuntimeError(f"opening answered {status}: {body[:300]!r}")
            session = session or named
        status, _, body = _exchange(conn, call, session)
        if status != 200:
            raise RuntimeError(f"session call answered {status}: {body[:300]!r}")
        return body
    finally:
        conn.close()


def execution_ids(body: bytes) -> list[str]:
    answer: dict[str, Any] = msgspec.json.decode(body)
    return [e["id"] for e in answer["result"]["structuredContent"]["executions"]]


def _accounted(pid: int, port: int, requests: list[Request], opening: list[Request],
               settings: Settings) -> tuple[Result, dict[str, float]]:  # fmt: skip
    with CpuAccount(pid) as cpu:
        result = load(
            job(
                port,
                requests,
                opening=opening,
                concurrency=settings.concurrency,
                warmup_seconds=WARMUP_SECONDS,
                duration_seconds=settings.duration,
                expect=EXPECT,
            )  # fmt: skip
        )
    if result.errors:
        _say(f"  {result.errors} errors: {result.first_error[:300]}")
    return result, cpu.per_call_ms(result.rps * (settings.duration + WARMUP_SECONDS))


async def run(settings: Settings) -> str:
    settings = dataclasses.replace(settings, duration=min(settings.duration, MAX_SECONDS))
    rounds = max(2 * settings.rounds, MIN_ROUNDS)
    data, cfg, access = await prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-sessions-"))
    port = cfg.port
    env = service_env(data.dsn, port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    arguments = {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE}
    command = python("-m", "service", "serve")

    def paths() -> dict[str, tuple[list[Request], list[Request]]]:  # fresh tokens a run
        token = access.token()
        return {
            STATELESS: ([scenarios.tool_call(token, TOOL, arguments)], []),
            SESSION: (
                [scenarios.session_tool_call(token, TOOL, arguments)],
                scenarios.session_opening(token),
            ),
        }

    runs: dict[str, list[tuple[Result, dict[str, float]]]] = {STATELESS: [], SESSION: []}
    loaded: dict[str, list[float]] = {STATELESS: [], SESSION: []}  # transactions a call
    counter = await asyncpg.connect(data.dsn)
    with running("elova", command, port, env, logs) as server:
        (stateless, _), (session, opening) = paths().values()
        same = execution_ids(post(port, stateless[0])) == execution_ids(
            session_answer(port, opening, session[0])
        )
        _say(f"session path: same executions as the stateless path: {same}")
        order = list(runs)
        for number in range(rounds):
            for label in order if number % 2 == 0 else order[::-1]:
                _say(f"{label.split(' (')[0]}: throughput run, round {number + 1} …")
                requests, opening = paths()[label]
                before = await counter.fetchval(XACTS)
                runs[label].append(_accounted(server.pid, port, requests, opening, settings))
                await asyncio.sleep(STATS_FLUSH_SECONDS)
                result = runs[label][-1][0]
                calls = result.rps * (settings.duration + WARMUP_SECONDS)
                loaded[label].append((await counter.fetchval(XACTS) - before - 1) / max(calls, 1))
    await counter.close()
    statements = {}
    for label, (requests, opening) in paths().items():
        statements[label] = statements_per_call(
            data.dsn, "elova-count", command, port, env, logs, requests[0], EXPECT,
            opening=opening,
        )  # fmt: skip
    shutil.rmtree(logs, ignore_errors=True)
    rows = [median_row(label, results) for label, results in runs.items()]
    per_round = [s[0].rps / m[0].rps for m, s in zip(runs[STATELESS], runs[SESSION], strict=True)]
    ratio = rows[1].result.rps / rows[0].result.rps
    cpu = [row.cpu_ms or {} for row in rows]
    opened = sum(r.openings for r, _ in runs[SESSION])
    lines = [
        f"## The session path: `tools/call {TOOL}` (first page, {scenarios.PAGE} rows) in a "
        f"2025-11-25 session beside the stateless call, one replica, {settings.concurrency} "
        f"connections, {settings.duration:.0f} s a run, {rounds} rounds alternating the paths",
        "",
        f"- Same answer: the two paths returned {'the same' if same else '**DIFFERENT**'} "
        f"execution ids for one call.",
        "",
        throughput_table(rows)
        .replace("| server |", "| path |")
        .replace("ours ÷ this", "stateless ÷ this"),
        "",
        f"- session ÷ stateless = **{ratio:.2f}×** (target ≥ {TARGET:.1f}×: "
        f"{'met' if ratio >= TARGET else '**not met**'}; median of the per-round ratios "
        f"{statistics.median(per_round):.2f}×); per round: "
        + ", ".join(f"{r:.2f}×" for r in per_round)
        + f". Server CPU a call: stateless {cpu[0].get('server', 0):.3f} ms, session "
        f"{cpu[1].get('server', 0):.3f} ms (session ÷ stateless "
        f"**{cpu[1].get('server', 0) / max(cpu[0].get('server', 0), 1e-9):.2f}**: on a "
        "machine the server saturates, throughput goes as its inverse).",
        "- PostgreSQL transactions a call (300 sequential calls): "
        + "; ".join(f"{label.split(' (')[0]} {n:.1f}" for label, n in statements.items())
        + "; under the load above (every call of the runs, other users of the database "
        "included): "
        + "; ".join(
            f"{label.split(' (')[0]} {statistics.median(n):.2f}" for label, n in loaded.items()
        )
        + f". Sessions opened by the load generator: {opened} (one a connection a run); "
        f"1-minute load average {loadavg()} at the end.",
    ]
    return "\n".join(lines) + "\n"


def main(settings: Settings) -> str:
    return asyncio.run(run(settings))


if __name__ == "__main__":
    from tests.bench import scale

    quick = "--quick" in sys.argv[1:]
    sys.stdout.write(main(scale.QUICK if quick else scale.FULL))
