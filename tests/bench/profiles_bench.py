"""CPU a call, as shipped: `python -m tests.bench --profiles-only` (a section of `make bench`).

Ours runs in the shipped profile (every setting at its default but database, Redis, key,
port, pool size and limits raised so that nothing refuses: INFO access lines and the audit
trail on stdout, written to a file as a log collector reads them) and in the quiet one
(WARNING, the audit trail to a file), beside the peers as they ship (the official Python
SDK and FastMCP under uvicorn with its access log on, the TypeScript SDK server as its
example runs) and the same-answer ceiling (tests/bench/same_answer.py), all answering the
same `tools/call get_many_executions` first page.

The judged figure is CPU a call: the server process's user + system CPU over the measured
window (/proc/<pid>/stat before and after) divided by the calls it answered, plus, for ours,
the CPU of a redis-server of its own (Redis is part of our contract; the peers and the
ceiling have none). Pinned: the server under test alone on core 1, the load generator (wrk,
Debian's native one, where installed: tests/bench/wrk_load.py) and that redis-server on
core 0 (`taskset`); PostgreSQL is the machine's and not pinned. Every
round starts each server afresh, warms it, then measures; rounds are interleaved (the order
reversed every other round). Req/s is printed as information: on 2 shared cores it says
more about the machine than the server.

Beside each run, the steal time of the server's core over the window (/proc/stat: time
the hypervisor gave that virtual CPU's turn to another guest), as a share of the window:
a guest's process CPU can include time its core was not running it, so a round with steal
reads slower than it was, and a ratio of two runs with different steal moves with it.

Then, where valgrind is installed, the instructions a call of ours in both profiles and of
the ceiling (callgrind, `INSTRUCTION_CALLS` calls after a warm-up, one run each): the
reading that repeats within about 1 % whatever else the machine does, where CPU time on
this machine's shared cores moves by more than the ±10 % the targets tell apart. It counts
the server process alone (not our Redis), and not the system calls' time in the kernel.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from tests.bench import peers, scenarios, wrk_load
from tests.bench.callgrind import control, instructions, under_callgrind
from tests.bench.ceiling_bench import PEER_EXPECT
from tests.bench.loadgen import Job, Request, Result
from tests.bench.same_answer import TOOL
from tests.bench.scale import Settings, prepare
from tests.bench.servers import (
    QUIET,
    ROOT,
    SHIPPED,
    free_port,
    job,
    load,
    python,
    running,
    service_env,
)
from tests.support.services import new_redis_prefix

SERVER_CORE, LOAD_CORE = "1", "0"
ROUNDS = 5
EXPECT = '"isError":false'
GENERATOR_VARIABLE = "BENCH_GENERATOR"  # "python": tests/bench/loadgen.py even with wrk here
PEER_PROFILE_VARIABLE = "BENCH_PEER_PROFILE"  # "shipped": a peer logs as it ships

OURS_SHIPPED = "ours, shipped"
OURS_QUIET = "ours, quiet"
SDK = "Python SDK"
CEILING = "same-answer ceiling"
# Server CPU a call of the peer ÷ ours shipped (server + Redis): at least this (issue 40).
PEER_TARGETS = {"TypeScript SDK": 2.0, SDK: 3.5, "FastMCP": 3.5}
CEILING_TARGET = 1.30  # ours shipped (server + Redis) ÷ the ceiling, at most
QUIET_TARGET = 1.10  # ours shipped ÷ ours quiet, at most
INSTRUCTION_CALLS = 400  # calls counted under callgrind, which runs a server ~50x slower


@dataclasses.dataclass(frozen=True)
class Contender:
    name: str
    argv: list[str]
    port: int
    request: Callable[[], Request]
    expect: str
    uses_redis: bool = False
    profile: str = QUIET


@dataclasses.dataclass(frozen=True)
class Run:
    server_ms: float  # server CPU a call
    redis_ms: float  # our redis-server's CPU a call (0 for a server without Redis)
    rps: float
    p50_ms: float
    steal: float = 0.0  # the server core's steal time ÷ the window

    @property
    def total_ms(self) -> float:
        return self.server_ms + self.redis_ms


def cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (its threads included)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steal_seconds(core: str) -> float:
    """The steal time of one CPU so far (0 where /proc/stat does not say)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            fields = line.split()
            return int(fields[8]) / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0
    return 0.0


def pinned(core: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", core, *argv]


def pinned_load(work: Job, *, native: bool = True) -> Result:
    """The load generator as a process of its own, on the load core: wrk where it is
    installed (tests/bench/wrk_load.py), else the Python one (tests/bench/loadgen.py).
    `native=False` keeps the Python one: what a job under shedding needs (the overload
    line), as only it times the admitted answers alone and counts the 503s that carry
    Retry-After; wrk's script times every answer, the (paced) 503s too."""
    if native and _uses_wrk() and wrk_load.supports(work):
        return wrk_load.run(work, prefix=pinned(LOAD_CORE, []))
    done = subprocess.run(
        pinned(LOAD_CORE, python("-m", "tests.bench.loadgen")),
        cwd=ROOT,
        input=msgspec.json.encode(work),
        capture_output=True,
        timeout=work.warmup_seconds + work.duration_seconds + 120,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"load generator failed: {done.stderr.decode()[-2000:]}")
    return msgspec.json.decode(done.stdout, type=Result)


@contextlib.contextmanager
def private_redis(logs: Path) -> Iterator[tuple[str, int]]:
    """A redis-server of our own on the load core (no persistence): its URL and pid."""
    port = free_port()
    command = pinned(LOAD_CORE, ["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                                 "--save", "", "--appendonly", "no"])  # fmt: skip
    with running("redis", command, port, dict(os.environ), logs) as server:
        yield f"redis://127.0.0.1:{port}/0", server.pid


def measure(
    who: Contender, env: dict[str, str], logs: Path, redis_pid: int, seconds: float,
    connections: int,
) -> Run:  # fmt: skip
    with running("profiles", pinned(SERVER_CORE, who.argv), who.port, env, logs) as server:
        requests = [who.request()]
        pinned_load(job(who.port, requests, concurrency=connections, warmup_seconds=1.5,
                        duration_seconds=0.5, expect=who.expect))  # fmt: skip
        server_before, redis_before = cpu_seconds(server.pid), cpu_seconds(redis_pid)
        steal_before, started = steal_seconds(SERVER_CORE), time.monotonic()
        result = pinned_load(job(who.port, requests, concurrency=connections,
                                 warmup_seconds=0.0, duration_seconds=seconds,
                                 expect=who.expect))  # fmt: skip
        server_used = cpu_seconds(server.pid) - server_before
        redis_used = cpu_seconds(redis_pid) - redis_before
        stolen = steal_seconds(SERVER_CORE) - steal_before
        window = max(time.monotonic() - started, 1e-9)
    if result.errors:
        raise RuntimeError(f"{who.name}: {result.errors} errors: {result.first_error[:300]}")
    calls = max(result.completed, 1)
    redis_ms = 1000 * redis_used / calls if who.uses_redis else 0.0
    return Run(1000 * server_used / calls, redis_ms, result.rps, result.p50_ms, stolen / window)


def count_instructions(who: Contender, env: dict[str, str], logs: Path, calls: int,
                       connections: int) -> float:  # fmt: skip
    """Instructions a call of one server: started under callgrind with counting off, warmed
    up, then `calls` calls counted (the dump is read once the server has exited)."""
    out = logs / f"callgrind.{who.name.replace(' ', '-').replace(',', '')}.out"
    # ~50x slower under valgrind: a Redis reply must not outlast the client's timeout.
    env = {**env, "ELOVA_REDIS_TIMEOUT_MS": "10000"}
    with running("instructions", under_callgrind(who.argv, out), who.port, env, logs) as server:
        request = who.request()
        load(job(who.port, [request], concurrency=connections, warmup_seconds=1.0,
                 duration_seconds=1.0, expect=who.expect))  # fmt: skip
        control(server.pid, ("-i", "on"))
        done = load(job(who.port, [request], concurrency=connections, warmup_seconds=0.0,
                        duration_seconds=900.0, max_requests=calls, expect=who.expect))  # fmt: skip
        control(server.pid, ("-i", "off"))
    if done.errors:
        raise RuntimeError(f"{who.name}: {done.errors} errors: {done.first_error[:300]}")
    return instructions(out) / max(done.completed, 1)


def _counts_instructions() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def _contenders(
    dsn: str, port: int, ours_request: Callable[[], Request], ws: object, approval: str
) -> list[Contender]:
    sdk_call: Callable[[], Request] = lambda: scenarios.sdk_call(ws)  # type: ignore[arg-type]  # noqa: E731
    serve = python("-m", "service", "serve")
    found = [
        Contender(OURS_SHIPPED, serve, port, ours_request, EXPECT, True, SHIPPED),
        Contender(OURS_QUIET, serve, port, ours_request, EXPECT, True, QUIET),
    ]
    sdk_port = free_port()
    found.append(Contender(
        SDK, python("-m", "tests.bench.reference", "sdk", "--port", str(sdk_port), "--dsn", dsn),
        sdk_port, sdk_call, EXPECT,
    ))  # fmt: skip
    absent = peers.missing()
    for peer in peers.PEERS:
        if peer not in absent:
            peer_port = free_port()
            found.append(
                Contender(
                    peer.short, peer.command(peer_port, dsn), peer_port, sdk_call, PEER_EXPECT
                )  # fmt: skip
            )
    ceiling_port = free_port()
    found.append(Contender(
        CEILING,
        python("-m", "tests.bench.same_answer", "--port", str(ceiling_port), "--dsn", dsn,
               "--approval", approval),
        ceiling_port, ours_request, EXPECT,
    ))  # fmt: skip
    return found


def _spread(values: list[float], digits: int = 3) -> str:
    return (f"{statistics.median(values):.{digits}f} "
            f"({min(values):.{digits}f}–{max(values):.{digits}f})")  # fmt: skip


def _ratio_row(label: str, ratios: list[float], target: str, met: bool) -> str:
    by_round = ", ".join(f"{r:.2f}" for r in ratios)
    verdict = "yes" if met else "**no**"
    return f"| {label} | **{statistics.median(ratios):.2f}×** ({by_round}) | {target} | {verdict} |"


def _uses_wrk() -> bool:
    """wrk unless it is absent or GENERATOR_VARIABLE says `python` (to compare the two)."""
    return os.environ.get(GENERATOR_VARIABLE, "wrk") != "python" and wrk_load.available()


def _generator() -> str:
    return "wrk, one thread" if _uses_wrk() else "tests/bench/loadgen.py"


def instructions_report(counted: dict[str, float], calls: int) -> list[str]:
    """The instructions table: each server's count, then ours shipped ÷ the ceiling and ÷
    ours quiet (the server alone: these leave our Redis out)."""
    lines = [
        "",
        f"Instructions a call (callgrind, {calls} calls after a warm-up, one run each; the "
        "server process alone, so our Redis is not in these):",
        "",
        "| server | instructions a call |",
        "| --- | ---: |",
    ]
    lines += [f"| {name} | {n / 1000:,.0f}k |" for name, n in counted.items()]
    shipped = counted.get(OURS_SHIPPED)
    if shipped:
        lines.append("")
        for label, other in (("the same-answer ceiling", CEILING), ("ours quiet", OURS_QUIET)):
            if counted.get(other):
                lines.append(f"- ours shipped ÷ {label}, instructions: "
                             f"**{shipped / counted[other]:.2f}**")  # fmt: skip
    return lines


def report(runs: dict[str, list[Run]], rounds: int, seconds: float, connections: int,
           executions: int, absent: list[str],
           counted: dict[str, float] | None = None) -> str:  # fmt: skip
    lines = [
        f"## CPU a call as shipped: `tools/call {TOOL}` (first page, {scenarios.PAGE} rows), "
        f"{connections} connections, {rounds} interleaved rounds of {seconds:.0f} s, "
        f"{executions:,} executions",
        "",
        f"Each server alone on core 1; the load generator ({_generator()}) and our "
        "redis-server on core 0; "
        "PostgreSQL unpinned. CPU a call: the process's user + system CPU over the measured "
        "window ÷ calls answered; median (min–max) of the rounds. Steal: the time the "
        "hypervisor took core 1 from this guest during the window, as a share of it "
        "(a run with steal reads slower than it was).",
    ]
    if absent:
        lines.append(f"Left out, not installed here ({peers.INSTALL}): {', '.join(absent)}.")
    lines += [
        "",
        "| server | CPU a call, ms | our Redis ms | server + Redis ms | req/s | p50 ms "
        "| steal, core 1, % |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, done in runs.items():
        lines.append(
            f"| {name} | {_spread([r.server_ms for r in done])} "
            f"| {_spread([r.redis_ms for r in done])} | {_spread([r.total_ms for r in done])} "
            f"| {statistics.median(r.rps for r in done):.0f} "
            f"| {statistics.median(r.p50_ms for r in done):.2f} "
            f"| {_spread([100 * r.steal for r in done], 1)} |"
        )
    shipped = [r.total_ms for r in runs[OURS_SHIPPED]]
    lines += ["", "| figure (per round, median first) | ratio | target | met |",
              "| --- | ---: | ---: | :-: |"]  # fmt: skip
    for name, target in PEER_TARGETS.items():
        if name in runs:
            ratios = [r.total_ms / o for r, o in zip(runs[name], shipped, strict=True)]
            met = statistics.median(ratios) >= target
            lines.append(_ratio_row(f"{name} CPU a call ÷ ours shipped (server + Redis)",
                                    ratios, f"≥ {target:.1f}×", met))  # fmt: skip
    for label, other, target in (
        ("ours shipped (server + Redis) ÷ same-answer ceiling", CEILING, CEILING_TARGET),
        ("ours shipped ÷ ours quiet (server + Redis)", OURS_QUIET, QUIET_TARGET),
    ):
        ratios = [o / r.total_ms for o, r in zip(shipped, runs[other], strict=True)]
        met = statistics.median(ratios) <= target
        lines.append(_ratio_row(label, ratios, f"≤ {target:.2f}", met))
    if counted:
        lines += instructions_report(counted, INSTRUCTION_CALLS)
    return "\n".join(lines) + "\n"


async def run(settings: Settings, rounds: int = ROUNDS) -> str:
    if shutil.which("taskset") is None or shutil.which("redis-server") is None:
        return "## CPU a call as shipped\n\nLeft out: needs `taskset` and `redis-server`.\n"
    seconds = min(settings.duration, 8.0)
    data, cfg, access = await prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-profiles-"))
    ws = access.workspace_id
    arguments = {"workspaceId": str(ws), "limit": scenarios.PAGE}

    def ours_request() -> Request:  # a fresh token a run: they live five minutes
        return scenarios.tool_call(access.token(), TOOL, arguments)

    contenders = _contenders(data.dsn, cfg.port, ours_request, ws, str(access.caller.approval_id))
    runs: dict[str, list[Run]] = {c.name: [] for c in contenders}
    with private_redis(logs) as (redis_url, redis_pid):
        envs = {}
        for profile in (SHIPPED, QUIET):
            env = service_env(data.dsn, cfg.port, redis_url, new_redis_prefix(),
                              cfg.signing_key_pem, profile)  # fmt: skip
            env[peers.STATEMENT_VARIABLE] = peers.statement()
            env[PEER_PROFILE_VARIABLE] = SHIPPED
            envs[profile] = env
        for number in range(rounds):
            order = contenders if number % 2 == 0 else contenders[::-1]
            for who in order:
                print(f"profiles: {who.name}, round {number + 1} …", file=sys.stderr, flush=True)
                done = measure(who, envs[who.profile], logs, redis_pid, seconds,
                               settings.concurrency)  # fmt: skip
                runs[who.name].append(done)
                time.sleep(0.2)
        counted: dict[str, float] = {}
        if _counts_instructions():
            for who in contenders:
                if who.name in (OURS_SHIPPED, OURS_QUIET, CEILING):
                    print(f"profiles: {who.name}, instructions …", file=sys.stderr, flush=True)
                    counted[who.name] = count_instructions(
                        who, envs[who.profile], logs, INSTRUCTION_CALLS, settings.concurrency
                    )
    shutil.rmtree(logs, ignore_errors=True)
    absent = [p.short for p in peers.missing()]
    return report(runs, rounds, seconds, settings.concurrency, data.executions, absent, counted)


def main(settings: Settings, rounds: int = ROUNDS) -> str:
    return asyncio.run(run(settings, rounds))


if __name__ == "__main__":
    from tests.bench import scale

    quick = "--quick" in sys.argv
    sys.stdout.write(main(scale.QUICK if quick else scale.FULL, 2 if quick else ROUNDS))
