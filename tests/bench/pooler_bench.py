"""The pooler line of `make bench` (issue 12): `tools/call get_many_executions` throughput of
one replica through PgBouncer in transaction mode (ELOVA_DATABASE_POOLER=transaction: no
prepared statements, settings per transaction) next to the same replica on a direct
connection, rounds alternating in one run; and the PostgreSQL round trips a call costs each
way, counted by a loopback proxy between the service and its database (a round trip: the
client sending again after the server answered)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.bench import scale, scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.servers import (
    POOL_SIZE,
    CpuAccount,
    job,
    load,
    python,
    running,
    service_env,
)
from tests.support.engines_pg import pgbouncer_version, start_pgbouncer
from tests.support.services import REDIS_URL, new_redis_prefix

WARMUP_SECONDS = 1.0
COUNTED_CALLS = 300


def _via(dsn: str, port: int) -> str:
    parts = urlsplit(dsn)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))


@dataclass
class _Counter:
    """A loopback proxy in a thread of its own that counts round trips on every connection."""

    target: tuple[str, int]
    port: int = 0
    round_trips: int = 0
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _ready: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> _Counter:
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _start(self) -> None:
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        answered = [True]  # the server spoke since the client last sent

        async def pipe(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, from_client: bool
        ) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    if from_client and answered[0]:
                        self.round_trips += 1
                    answered[0] = not from_client
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer, True), pipe(up_reader, writer, False))


def _round_trips(env: dict[str, str], port: int, logs: Path, request: Request) -> float:
    """Round trips to PostgreSQL (or the pooler) a call, over sequential calls."""
    target = urlsplit(env["ELOVA_DATABASE_URL"])
    with _Counter((target.hostname or "127.0.0.1", target.port or 5432)) as counter:
        counted = {**env, "ELOVA_DATABASE_URL": _via(env["ELOVA_DATABASE_URL"], counter.port)}
        with running("elova-round-trips", python("-m", "service", "serve"), port, counted, logs):
            load(job(port, [request], warmup_seconds=0.5, duration_seconds=1.0))
            before = counter.round_trips
            done = load(job(port, [request], warmup_seconds=0.0, duration_seconds=60.0,
                            max_requests=COUNTED_CALLS))  # fmt: skip
            after = counter.round_trips
    return (after - before) / max(done.completed + done.errors, 1)


def section(
    dsn: str,
    env: dict[str, str],
    port: int,
    logs: Path,
    access: scenarios.Access,
    *,
    concurrency: int,
    duration: float,
    rounds: int,
) -> list[str]:
    """The report's pooler section (Markdown lines)."""
    upstream = urlsplit(dsn).port or 5432
    database = urlsplit(dsn).path.lstrip("/")
    # The "server" variant's settings come from PgBouncer's connect_query (on each new server
    # connection) — as ALTER ROLE … SET would — leaving the shared database as it is.
    timeout = int(env.get("ELOVA_REQUEST_DEADLINE_SECONDS", "30")) * 1000 + 1000
    settled = f"{database}_settled"
    connect_query = f"SET statement_timeout = {timeout}; SET jit = off"
    aliases = {settled: f"dbname={database} connect_query='{connect_query}'"}
    bouncer = start_pgbouncer(upstream, pool_size=int(POOL_SIZE), aliases=aliases)
    try:
        pooled = {**env, "ELOVA_DATABASE_URL": bouncer.dsn(database),
                  "ELOVA_DATABASE_POOLER": "transaction"}  # fmt: skip
        ways = {
            "direct (statements prepared once per connection)": env,
            f"{pgbouncer_version()}, transaction mode, no prepared statements, settings SET LOCAL "
            "per transaction (ELOVA_DATABASE_POOLER_SETTINGS=per_transaction)": pooled,
            "same, settings on the server side (ELOVA_DATABASE_POOLER_SETTINGS=server)": {
                **pooled,
                "ELOVA_DATABASE_URL": bouncer.dsn(settled),
                "ELOVA_DATABASE_POOLER_SETTINGS": "server",
            },
        }

        def request() -> Request:  # a fresh token a run: they live 5 minutes
            return scenarios.tool_call(
                access.token(), "get_many_executions",
                {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE},
            )  # fmt: skip

        results: dict[str, list[Result]] = {label: [] for label in ways}
        cpu: dict[str, list[dict[str, float]]] = {label: [] for label in ways}
        for _ in range(rounds):
            for label, way in ways.items():
                with running("elova-pooler-bench", python("-m", "service", "serve"), port,
                             way, logs) as server:  # fmt: skip
                    bouncer_before = _bouncer_cpu()
                    with CpuAccount(server.pid) as account:
                        result = load(job(
                            port, [request()], concurrency=concurrency,
                            warmup_seconds=WARMUP_SECONDS, duration_seconds=duration,
                            expect='"isError":false'))  # fmt: skip
                    calls = result.rps * (duration + WARMUP_SECONDS)
                    per_call = account.per_call_ms(calls)
                    per_call["pgbouncer"] = 1000 * (_bouncer_cpu() - bouncer_before) / calls
                    results[label].append(result)
                    cpu[label].append(per_call)
        trips = {label: _round_trips(way, port, logs, request()) for label, way in ways.items()}
    finally:
        bouncer.stop()
    return _report(results, cpu, trips, concurrency, duration, rounds)


def _bouncer_cpu() -> float:
    """CPU seconds (user + system) used so far by every running pgbouncer process."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == "pgbouncer":
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _report(
    results: dict[str, list[Result]],
    cpu: dict[str, list[dict[str, float]]],
    trips: dict[str, float],
    concurrency: int,
    duration: float,
    rounds: int,
) -> list[str]:
    direct = statistics.median(r.rps for r in next(iter(results.values())))
    lines = [
        f"## Through a transaction-mode pooler: `get_many_executions` (50 rows), {concurrency} "
        f"concurrent connections, {duration:.0f} s, {rounds} alternating round(s)",
        "",
        "| PostgreSQL connection | req/s (median; rounds) | p50 ms | p99 ms | errors "
        "| ÷ direct | round trips a call | CPU a call: server / PostgreSQL / PgBouncer, ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, runs in results.items():
        order = sorted(range(len(runs)), key=lambda i: runs[i].rps)
        middle, used = runs[order[(len(runs) - 1) // 2]], cpu[label][order[(len(runs) - 1) // 2]]
        each = ", ".join(f"{r.rps:.0f}" for r in runs)
        spent = " / ".join(f"{used.get(g, 0.0):.2f}" for g in ("server", "postgres", "pgbouncer"))
        lines.append(
            f"| {label} | {middle.rps:.0f} ({each}) | {middle.p50_ms:.1f} | {middle.p99_ms:.1f} "
            f"| {sum(r.errors for r in runs)} | {middle.rps / direct:.2f} | {trips[label]:.1f} "
            f"| {spent} |"
        )
    shares = [statistics.median(r.rps for r in runs) / direct for runs in results.values()]
    verdict = ", ".join(
        f"{100 * share:.0f}% ({'met' if share >= 0.75 else '**missed**'})" for share in shares[1:]
    )
    lines += [
        "",
        f"- Through the pooler, per transaction / server-side settings: {verdict} of direct "
        f"(target ≥ 75%). Round trips counted by a proxy over {COUNTED_CALLS} sequential calls.",
    ]
    return lines


def main(settings: scale.Settings) -> str:
    """The section on the benchmark's data set, its approval made anew."""
    if shutil.which("pgbouncer", path=f"{os.environ.get('PATH', '')}:/usr/sbin") is None:
        return "## Through a transaction-mode pooler: skipped (pgbouncer is not installed)\n"
    data, cfg, access = asyncio.run(scale.prepare(settings))  # the scale run's own setup
    logs = Path(tempfile.mkdtemp(prefix="elova-bench-pooler-"))
    env = service_env(data.dsn, cfg.port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    try:
        lines = section(
            data.dsn, env, cfg.port, logs, access,
            concurrency=settings.concurrency, duration=settings.duration, rounds=settings.rounds,
        )  # fmt: skip
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    return "\n".join(lines) + "\n"
