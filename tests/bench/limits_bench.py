"""Benchmark of the admission limiter (not a timed test): `python -m tests.bench.limits_bench`.

Prints, on this machine, against a private redis-server (nothing persisted):

- the EVALSHA ceiling of admit.lua measured by `redis-benchmark` (50 connections),
- the admissions a second of one Python process (acquire + release, 50 concurrent tasks),
  and the same with acquire only, as ratios of that ceiling,
- the per-request overhead: sequential acquire + release latency (p50 / p99), and an HTTP
  round trip to a trivial aiohttp handler with and without the limiter around it.

`python -m tests.bench.limits_bench --baseline COMMIT` measures instead, old against new
in interleaved rounds against one private redis-server, what an admission (acquire +
release) costs: the client process's CPU time and redis-server's, each divided by the
admissions made, with 16 concurrent tasks (batches shared, as on a busy replica) and with 1
(a call a batch, as on a quiet one). COMMIT runs from a temporary git worktree
(tests/bench/baseline.py). CPU time rather than rates: on a shared machine rates move with
the neighbours; medians and minimums over the rounds are printed, and the ratio new ÷ old
of each round's pair.

Caps are set so high that every admission is granted: the script's full write path runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web

from service.limits.admission import Admission
from service.limits.redis_client import make_client
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits
from tests.limits.conftest import RedisServer, make_caller

BIG = 1_000_000_000
LIMITS = Limits(
    global_concurrency=BIG, account_concurrency=BIG, approval_per_minute=BIG, lease_grace_seconds=5
)
SCRIPT = Path(__file__).resolve().parents[2] / "service" / "limits" / "admit.lua"
CONCURRENCY = 50
DURATION = 3.0


def evalsha_ceiling(port: int, requests: int = 50_000) -> float:
    """redis-benchmark's requests/s for EVALSHA admit.lua with random request ids."""
    text = SCRIPT.read_text()
    sha = hashlib.sha1(text.encode()).hexdigest()
    subprocess.run(
        ["redis-cli", "-p", str(port), "SCRIPT", "LOAD", text], check=True, capture_output=True
    )
    keys = [f"bench:{{limits}}:{k}" for k in ("account:a", "approval:a", "daily:a", "c")]
    cmd = [
        "redis-benchmark", "-p", str(port), "-n", str(requests), "-c", str(CONCURRENCY), "-q",
        "-r", "100000000", "EVALSHA", sha, "4", *keys,
        "__rand_int__", str(BIG), str(BIG), "35000", "0",
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    found = re.findall(r"([\d.]+) requests per second", out)
    if not found:
        raise RuntimeError(f"unexpected redis-benchmark output: {out!r}")
    return float(found[-1])


async def admissions_per_second(admission: Admission, *, release: bool) -> float:
    caller = make_caller()
    done = 0
    stop = time.perf_counter() + DURATION

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            grant = await admission.acquire(uuid.uuid4().hex, caller)
            if release:
                await admission.release(grant)
            done += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - started)


async def latencies(step: Callable[[], Awaitable[None]], n: int = 2000) -> list[float]:
    for _ in range(100):  # warm connections and scripts
        await step()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await step()
        out.append(time.perf_counter() - t)
    return out


def summary(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99)] * 1e6


async def http_round_trips(admission: Admission | None) -> list[float]:
    caller = make_caller()

    async def handler(request: web.Request) -> web.Response:
        if admission is None:
            return web.Response(text="{}")
        grant = await admission.acquire(uuid.uuid4().hex, caller)
        try:
            return web.Response(text="{}", headers=grant.headers())
        finally:
            await asyncio.shield(admission.release(grant))

    app = web.Application()
    app.router.add_post("/mcp", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        async with aiohttp.ClientSession() as http:

            async def step() -> None:
                async with http.post(url, data=b"{}") as resp:
                    await resp.read()

            return await latencies(step)
    finally:
        await runner.cleanup()


async def bench(server: RedisServer) -> None:
    ceiling = evalsha_ceiling(server.port)
    client = make_client(server.url)
    admission = Admission(LIMITS, redis=client, key_prefix="bench:", metrics=Metrics())
    local = Admission(LIMITS, redis=None, key_prefix="bench:", metrics=Metrics())
    await admission.warm_up()
    try:
        with_release = await admissions_per_second(admission, release=True)
        acquire_only = await admissions_per_second(admission, release=False)
        caller = make_caller()

        async def shared_step() -> None:
            await admission.release(await admission.acquire(uuid.uuid4().hex, caller))

        async def local_step() -> None:
            await local.release(await local.acquire(uuid.uuid4().hex, caller))

        shared_p50, shared_p99 = summary(await latencies(shared_step))
        local_p50, local_p99 = summary(await latencies(local_step))
        bare_p50, bare_p99 = summary(await http_round_trips(None))
        lim_p50, lim_p99 = summary(await http_round_trips(admission))
    finally:
        await admission.close()
        await client.aclose()

    print(f"redis-benchmark EVALSHA admit.lua ceiling ({CONCURRENCY} conns): {ceiling:,.0f}/s")
    print(
        f"one process, acquire+release ({CONCURRENCY} tasks): {with_release:,.0f} admissions/s"
        f" = {with_release / ceiling:.2f} of the ceiling (2 script calls each)"
    )
    print(
        f"one process, acquire only: {acquire_only:,.0f}/s = {acquire_only / ceiling:.2f}"
        " of the ceiling"
    )
    print(f"acquire+release latency, Redis: p50 {shared_p50:.0f} us, p99 {shared_p99:.0f} us")
    print(f"acquire+release latency, per-process: p50 {local_p50:.1f} us, p99 {local_p99:.1f} us")
    print(f"HTTP round trip without limiter: p50 {bare_p50:.0f} us, p99 {bare_p99:.0f} us")
    print(f"HTTP round trip with limiter:    p50 {lim_p50:.0f} us, p99 {lim_p99:.0f} us")
    print(
        f"limiter overhead per request: {lim_p50 - bare_p50:.0f} us at p50"
        f" (x{lim_p50 / bare_p50:.2f} of a bare round trip)"
    )


async def pair_costs(url: str, tasks: int, seconds: float) -> tuple[int, float]:
    """Admissions (acquire + release) made by `tasks` tasks in `seconds`, and the CPU time
    this process spent on them (run in a process of its own, by `--pairs`)."""
    client = make_client(url)
    admission = Admission(LIMITS, redis=client, key_prefix=f"pairs{uuid.uuid4().hex}:",
                          metrics=Metrics())  # fmt: skip
    await admission.warm_up()
    callers = [make_caller() for _ in range(4)]
    done = 0

    async def worker(index: int, stop: float) -> None:
        nonlocal done
        caller = callers[index % len(callers)]
        while time.perf_counter() < stop:
            grant = await admission.acquire(uuid.uuid4().hex, caller)
            await asyncio.sleep(0)  # the work between the two calls
            await admission.release(grant)
            done += 1

    try:
        await asyncio.gather(*(worker(i, time.perf_counter() + 0.5) for i in range(tasks)))
        done = 0
        cpu = time.process_time()
        await asyncio.gather(*(worker(i, time.perf_counter() + seconds) for i in range(tasks)))
        return done, time.process_time() - cpu
    finally:
        await admission.close()
        await client.aclose()


def _cpu_of(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def side_by_side(commit: str, rounds: int = 6, seconds: float = 2.0) -> str:
    from tests.bench.baseline import checkout

    lines = [f"Admission CPU, old ({commit}) against new, {rounds} interleaved rounds of "
             f"{seconds:.0f} s (µs an acquire + release)", "",
             "| tasks | tree | client CPU, median (min) | redis-server CPU, median (min) "
             "| new ÷ old, client (median of rounds) |",
             "| ---: | --- | ---: | ---: | ---: |"]  # fmt: skip
    with tempfile.TemporaryDirectory() as folder, checkout(commit) as old:
        server = RedisServer(Path(folder))
        server.start()
        assert server.proc is not None
        try:
            trees = {"old": old, "new": Path(__file__).resolve().parents[2]}
            for tasks in (16, 1):
                costs: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
                for _ in range(rounds):
                    for name, tree in trees.items():
                        before = _cpu_of(server.proc.pid)
                        done = subprocess.run(
                            # This file's worker, with `service` from the tree measured.
                            [sys.executable, __file__, "--pairs", server.url, str(tasks),
                             str(seconds)],
                            cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                            capture_output=True, text=True, check=True,
                        )  # fmt: skip
                        made, cpu = done.stdout.split()
                        redis_cpu = _cpu_of(server.proc.pid) - before
                        costs[name].append((float(cpu) / int(made), redis_cpu / int(made)))
                ratios = [n[0] / o[0] for o, n in zip(costs["old"], costs["new"], strict=True)]
                for name, runs in costs.items():
                    own, theirs = [r[0] * 1e6 for r in runs], [r[1] * 1e6 for r in runs]
                    ratio = f"**{statistics.median(ratios):.2f}**" if name == "new" else ""
                    lines.append(
                        f"| {tasks} | {name} | {statistics.median(own):.1f} ({min(own):.1f}) "
                        f"| {statistics.median(theirs):.1f} ({min(theirs):.1f}) | {ratio} |"
                    )
        finally:
            server.stop()
    return "\n".join(lines) + "\n"


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--pairs":
        made, cpu = asyncio.run(pair_costs(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))
        print(made, cpu)
        return 0
    if shutil.which("redis-server") is None or shutil.which("redis-benchmark") is None:
        print("redis-server and redis-benchmark are needed", file=sys.stderr)
        return 1
    if len(sys.argv) == 3 and sys.argv[1] == "--baseline":
        sys.stdout.write(side_by_side(sys.argv[2]))
        return 0
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder))
        server.start()
        try:
            asyncio.run(bench(server))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
