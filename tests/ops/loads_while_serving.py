"""A large snapshot loaded with `elova-mcp load` while `elova-mcp serve` answers a steady load
of tool calls: what readers see, what they wait for, what it costs them.

    python -m tests.ops.loads_while_serving                 # 100,000 executions (the check)
    python -m tests.ops.loads_while_serving --executions 25000 --base 2000

A database of its own holds version 1 of a world (one workspace, two instances, four
workflows, `base` executions), analysed as after any load. A real `elova-mcp serve` answers
`concurrency` clients calling a fixed mix in a closed loop: first pages of
get_many_executions (one statement), a second page through a cursor and get_execution
(the scope, then the rows: two statements), get_many_workflows and get_execution_stats.
Then `elova-mcp load` writes version 2: every record of version 1 changed (names end in
"v2", a later sync and observation time) and the rest of `executions` new.

Measured in phases — before the load, while the loader process runs (its ANALYZE
included), right after it exits, and settled (after an ANALYZE of the whole database by
hand, the steady state of the new records) — : latency percentiles of every call and of
the first pages.
Checked on every answer: a call answers 200 without a tool error, and one answer never holds
both versions (its rows' names, its coverage and its totals all say v1, or all v2).
Watched during the load (pg_locks and pg_stat_activity, every 20 ms): every lock the
loader's backend holds on a table, and any backend of the service waiting for a lock.
`flip` is the other scenario: many small loads, each turning every record to the other
version, so that commits land between the statements of answers. The world, the clients
and the version check: tests/ops/versioned_world.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg

from service.store.load_snapshot import load_snapshot
from tests.ops.versioned_world import FIRST_PAGES, Call, Client, World
from tests.support.server import ROOT, ServeProcesses
from tests.support.services import TestDatabase, create_database, drop_database

LOADER = "elova-load-while-serving"  # the loader backend's application_name
# Lock modes no reader's ACCESS SHARE (nor the service's row writes) conflicts with.
HARMLESS_MODES = {"AccessShareLock", "RowShareLock", "RowExclusiveLock", "ShareUpdateExclusiveLock"}


@dataclass
class Phase:
    calls: list[Call] = field(default_factory=list)

    def latencies(self, kinds: tuple[str, ...] | None = None) -> list[float]:
        return sorted(c.seconds for c in self.calls if kinds is None or c.kind in kinds)

    def percentile(self, share: float, kinds: tuple[str, ...] | None = None) -> float:
        ordered = self.latencies(kinds)
        if not ordered:
            return float("nan")
        return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000

    def summary(self) -> dict[str, Any]:
        return {
            "calls": len(self.calls),
            "p50_ms": round(self.percentile(0.5), 2),
            "p99_ms": round(self.percentile(0.99), 2),
            "max_ms": round(self.percentile(1.0), 2),
            "first_page_p50_ms": round(self.percentile(0.5, FIRST_PAGES), 2),
            "first_page_p99_ms": round(self.percentile(0.99, FIRST_PAGES), 2),
            "p99_ms_by_call": {
                kind: round(self.percentile(0.99, (kind,)), 2) for kind in sorted(Client.TOOLS)
            },
        }


@dataclass
class Outcome:
    base: int
    executions: int
    before: Phase
    during: Phase
    after: Phase  # right after the loader exited
    settled: Phase  # after an ANALYZE of the whole database: the steady state
    load_seconds: float
    analyze_line: str
    mixed: list[Call]
    errors: list[Call]
    versions_before: set[int]
    versions_after: set[int]
    loader_locks: set[tuple[str, str]]  # (table, mode) on permanent tables
    lock_waits: list[str]  # service backends seen waiting for a lock
    samples: int

    def report(self) -> dict[str, Any]:
        return {
            "base_executions": self.base,
            "loaded_executions": self.executions,
            "before": self.before.summary(),
            "during": self.during.summary(),
            "after": self.after.summary(),
            "settled": self.settled.summary(),
            "load_seconds": round(self.load_seconds, 2),
            "analyze": self.analyze_line,
            "mixed_answers": len(self.mixed),
            "errors": len(self.errors),
            "first_error": self.errors[0].error if self.errors else "",
            "loader_lock_modes": sorted({mode for _, mode in self.loader_locks}),
            "lock_waits_seen": len(self.lock_waits),
            "lock_samples": self.samples,
        }


# --- the loader and what it holds -----------------------------------------------------

_LOCKS = """
SELECT a.application_name, a.wait_event_type, a.pid, l.locktype, l.mode, l.granted,
       c.relname, c.relpersistence
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  LEFT JOIN pg_class c ON c.oid = l.relation
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
"""


async def watch_locks(
    dsn: str, done: asyncio.Event, loader_locks: set[tuple[str, str]], waits: list[str]
) -> int:
    """Sample the database's locks until `done`; return how many samples were taken."""
    conn = await asyncpg.connect(dsn)
    samples = 0
    try:
        while not done.is_set():
            for row in await conn.fetch(_LOCKS):
                if row["application_name"] == LOADER:
                    # Table locks (not the brief relation-extension ones, which only writers
                    # extending the same table take) on permanent tables: the loader's own
                    # staging table is temporary, invisible to every other session.
                    if row["locktype"] == "relation" and row["relpersistence"] == b"p":
                        loader_locks.add((row["relname"], row["mode"]))
                elif row["application_name"].startswith("elova-mcp") and (
                    not row["granted"] or row["wait_event_type"] == "Lock"
                ):
                    waits.append(f"{row['application_name']} {row['mode']} on {row['relname']}")
            samples += 1
            await asyncio.sleep(0.02)
    finally:
        await conn.close()
    return samples


def _load_command(dsn: str, path: str) -> list[str]:
    script = Path(sys.executable).with_name("elova-mcp")
    head = [str(script)] if script.exists() else [sys.executable, "-m", "service"]
    return [*head, "load", path]


def _env(dsn: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    sep = "&" if "?" in dsn else "?"
    env["ELOVA_DATABASE_URL"] = f"{dsn}{sep}application_name={LOADER}"
    return env


# --- the scenario ---------------------------------------------------------------------

# Admission limits far above the clients' closed loop: every call is answered.
_SERVE_ENV = {"LIMIT_GLOBAL_CONCURRENCY": "256", "LIMIT_ACCOUNT_CONCURRENCY": "256",
              "LIMIT_APPROVAL_PER_MINUTE": "10000000", "DB_POOL_MAX": "8"}  # fmt: skip


async def run(
    *,
    executions: int = 100_000,
    base: int = 10_000,
    concurrency: int = 4,
    before_seconds: float = 6.0,
    after_seconds: float = 6.0,
    database: TestDatabase | None = None,
    analyze: bool = True,
) -> Outcome:
    """The whole scenario on a database of its own (created and dropped here unless given).
    `analyze=False` loads both versions without their ANALYZE (what the loader did before
    it analysed): the contrast of `after` and `settled` is then what the ANALYZE buys."""
    own = database is None
    db = await create_database("elova_loads") if database is None else database
    try:
        return await _run(db, executions, base, concurrency, before_seconds, after_seconds, analyze)
    finally:
        if own:
            await drop_database(db)


async def _run(
    db: TestDatabase,
    executions: int,
    base: int,
    concurrency: int,
    before_seconds: float,
    after_seconds: float,
    analyze: bool,
) -> Outcome:
    world = World.new(executions)
    conn = await asyncpg.connect(db.dsn)
    try:
        await load_snapshot(conn, world.snapshot(1, base), analyze=analyze)
    finally:
        await conn.close()
    with tempfile.TemporaryDirectory(prefix="elova-loads-") as tmp:
        path = Path(tmp) / "v2.json"
        path.write_bytes(world.snapshot(2, executions))
        async with ServeProcesses(db.dsn, env=_SERVE_ENV) as server:
            tokens = await server.approve(account=world.email, workspaces=[world.workspace])
            client = Client(server.mcp_url, tokens.access_token, world, base, executions)
            connector = aiohttp.TCPConnector(limit=concurrency)
            async with aiohttp.ClientSession(connector=connector) as session:
                await client.prepare(session)
                workers = [
                    asyncio.create_task(client.worker(session, n)) for n in range(concurrency)
                ]
                try:
                    return await _phases(
                        db, client, workers, path, before_seconds, after_seconds, analyze
                    )
                finally:
                    client.stopping = True
                    await asyncio.gather(*workers, return_exceptions=True)


async def _phases(
    db: TestDatabase,
    client: Client,
    workers: list[asyncio.Task[None]],
    path: Path,
    before_seconds: float,
    after_seconds: float,
    analyze: bool,
) -> Outcome:
    await asyncio.sleep(1.5)  # warm: pools filled, plans cached
    marks = [time.monotonic()]
    await asyncio.sleep(before_seconds)
    done = asyncio.Event()
    loader_locks: set[tuple[str, str]] = set()
    waits: list[str] = []
    watcher = asyncio.create_task(watch_locks(db.dsn, done, loader_locks, waits))
    marks.append(time.monotonic())
    if analyze:
        out, err = await _load(db, path)
    else:  # what `elova-mcp load` did before it analysed: the same load, no ANALYZE
        out, err = await _load(db, path, analyze=False)
    marks.append(time.monotonic())
    done.set()
    samples = await watcher
    await asyncio.sleep(after_seconds)
    marks.append(time.monotonic())
    # The steady state of the new records: statistics of every table made current by hand,
    # as autovacuum would in the end (where it runs at all).
    conn = await asyncpg.connect(db.dsn)
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()
    marks.append(time.monotonic())
    await asyncio.sleep(after_seconds)
    marks.append(time.monotonic())
    client.stopping = True
    await asyncio.gather(*workers)
    phases = [Phase(), Phase(), Phase(), Phase(), Phase()]
    for call in client.calls:
        for i in range(len(phases)):
            # A call belongs to a phase when it started and ended inside it.
            if marks[i] <= call.started and call.started + call.seconds <= marks[i + 1]:
                phases[i].calls.append(call)
    said = next((line for line in err.decode().splitlines() if "ANALYZE" in line), "")
    return Outcome(
        base=client.base,
        executions=client.total,
        before=phases[0],
        during=phases[1],
        after=phases[2],
        settled=phases[4],
        load_seconds=marks[2] - marks[1],
        analyze_line=said.strip() + " | " + out.decode().strip(),
        mixed=[c for c in client.calls if len(c.versions) > 1 or 0 in c.versions],
        errors=[c for c in client.calls if c.error],
        versions_before={v for c in phases[0].calls for v in c.versions},
        versions_after={v for c in phases[2].calls for v in c.versions},
        loader_locks=loader_locks,
        lock_waits=waits,
        samples=samples,
    )


_WITHOUT_ANALYZE = """
import asyncio, sys
from service.cli import load
from service.store import statistics
async def nothing(conn, tables):
    return statistics.Analyzed()
statistics.analyze = nothing
sys.exit(load.run(load.argparse.Namespace(file=sys.argv[1])))
"""


@dataclass
class Flips:
    loads: int
    calls: list[Call]
    mixed: list[Call]
    errors: list[Call]
    versions: set[int]


async def flip(
    *, executions: int = 300, loads: int = 40, concurrency: int = 4, pause: float = 0.1
) -> Flips:
    """Many small loads while serving, each turning every record to the other version: a
    commit lands between the two statements of some answers unless they share a snapshot
    (with the scope and the rows read apart, 40 loads gave 1 to 3 mixed answers a run)."""
    db = await create_database("elova_flips")
    try:
        world = World.new(executions)
        documents = {v: world.snapshot(v, executions) for v in (1, 2)}
        conn = await asyncpg.connect(db.dsn)
        try:
            await load_snapshot(conn, documents[1])
            async with ServeProcesses(db.dsn, env=_SERVE_ENV) as server:
                tokens = await server.approve(account=world.email, workspaces=[world.workspace])
                client = Client(server.mcp_url, tokens.access_token, world, executions, executions)
                connector = aiohttp.TCPConnector(limit=concurrency)
                async with aiohttp.ClientSession(connector=connector) as session:
                    await client.prepare(session)
                    workers = [
                        asyncio.create_task(client.worker(session, n)) for n in range(concurrency)
                    ]
                    try:
                        for n in range(loads):
                            await asyncio.sleep(pause)
                            await load_snapshot(conn, documents[2 - n % 2])
                        await asyncio.sleep(pause)
                    finally:
                        client.stopping = True
                        await asyncio.gather(*workers, return_exceptions=True)
        finally:
            await conn.close()
    finally:
        await drop_database(db)
    return Flips(
        loads=loads,
        calls=client.calls,
        mixed=[c for c in client.calls if len(c.versions) > 1 or 0 in c.versions],
        errors=[c for c in client.calls if c.error],
        versions={v for c in client.calls for v in c.versions},
    )


async def _load(db: TestDatabase, path: Path, *, analyze: bool = True) -> tuple[bytes, bytes]:
    """`elova-mcp load` in a process of its own (`analyze=False`: with its ANALYZE left out)."""
    command = _load_command(db.dsn, str(path))
    if not analyze:
        command = [sys.executable, "-c", _WITHOUT_ANALYZE, str(path)]
    proc = await asyncio.create_subprocess_exec(
        *command,
        env=_env(db.dsn),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"elova-mcp load exited {proc.returncode}: {err.decode()}")
    return out, err


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.ops.loads_while_serving")
    parser.add_argument("--executions", type=int, default=100_000)
    parser.add_argument("--base", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=6.0, help="before and after phases")
    parser.add_argument(
        "--without-analyze", action="store_true", help="load as before the loader analysed"
    )
    args = parser.parse_args()
    outcome = asyncio.run(
        run(
            executions=args.executions,
            base=args.base,
            concurrency=args.concurrency,
            before_seconds=args.seconds,
            after_seconds=args.seconds,
            analyze=not args.without_analyze,
        )
    )
    sys.stdout.write(json.dumps(outcome.report(), indent=2) + "\n")
    return 0 if not outcome.mixed and not outcome.errors else 1


if __name__ == "__main__":
    sys.exit(main())
