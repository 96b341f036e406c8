"""Floods, idle connections and overload on one replica (issue "floods").

One server process (Redis admission on, limits raised as in the scale benchmark) serves a
good approval calling `tools/call get_many_executions` (first page, 50 rows) on N
connections, alone, then at once beside a second load generator flooding on N connections
of its own with one kind of refusal; each flood is compared with the solo run just before it
(on a shared machine a single solo rate for the whole section drifts with the load):

    rate        an approval whose rate budget is spent (every answer 429)
    expired     an access token whose exp lies an hour in the past (401)
    signature   a valid token with its last signature characters altered (401)
    garbage     a bearer of random token characters (401)
    no token    no Authorization header (401)
    oversized   a body over ELOVA_MAX_BODY_BYTES (413)

The per-minute budget is one setting for every approval, so the flooding approval's budget
is spent in Redis instead: its token bucket is written empty with a timestamp far ahead,
and the admission script, which never refills a bucket stamped in the future, refuses it
every time while the good approval's bucket (limits raised) never runs dry.

Every flood runs twice, on two servers one after the other: with refusal pacing off
(ELOVA_PACE_REFUSALS_AFTER=0), which measures what each refusal costs and what the good
approval keeps when a client can get as many refusals as the server can write; and with
pacing at its defaults (docs/decisions/floods.md#refusal-pacing), what it keeps as shipped.

Server CPU a refusal (measured with pacing off): the server process's CPU time (utime +
stime from /proc/PID/stat) is read at two instants inside the measured window of each run,
giving CPU seconds a second.
The solo run gives the CPU of one good call (CPU/s ÷ good calls/s); in a flood run the good
calls made are charged at that cost and the rest is the refusals':

    CPU a refusal = (CPU/s under flood − good calls/s under flood × CPU a good call)
                    ÷ refusals/s

and, without that estimate, with the flood alone right after (the server saturated by
refusals only): CPU/s ÷ refusals/s. The floor beside it: the same flood (expired token)
against a bare aiohttp server that answers every request with one precomputed 401
(`tests.bench.reference refusal`), what any aiohttp server spends on a refusal on this
machine, measured right after each flood-alone run (ours and the older commit's), so that
each refusal is judged against a floor read under the same load of the shared machine.

Then 500 idle keep-alive connections (tests/bench/holder.py: each served one request,
then held) beside the good load; and overload: 4×N connections of the good approval,
against the replica that serves N, with the p99 of the admitted calls (200) against the
p99 alone on N, the share shed with 503 and whether those 503s carried Retry-After, with
pacing off and at its defaults (the load generator retries a 503 at once). Each of these
also follows a solo run of its own.

Targets: CPU a refusal < 0.1 ms and ≤ 2× the floor beside it (429, every 401 kind and the
413; the flood-alone figure, the one with nothing to subtract); the good approval keeps
≥ 75 % of its solo rate under each flood (as shipped: pacing on) and ≥ 90 % beside the
idle connections; overload admitted p99 ≤ 2× the solo p99 (as shipped).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import msgspec
import redis

from service.auth.tokens import TokenService
from service.config import Config
from tests.bench import scenarios
from tests.bench.baseline import checkout
from tests.bench.dataset import Dataset
from tests.bench.loadgen import Job, Request, Result
from tests.bench.scale import WARMUP_SECONDS, Settings, prepare
from tests.bench.servers import ROOT, free_port, job, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

TOOL = "get_many_executions"
EXPECT = '"isError":false'
IDLE_CONNECTIONS = 500
OVERLOAD_FACTOR = 4
CPU_TARGET_MS = 0.1
FLOOR_TARGET = 2.0  # CPU a refusal ÷ the bare aiohttp refusal's, measured beside it
FLOOD_SHARE_TARGET = 0.75
IDLE_SHARE_TARGET = 0.90
OVERLOAD_P99_TARGET = 2.0
MAX_SECONDS = 6.0  # a run (36 of them): ratios need no longer, `make bench` stays short
_LAG = 0.6  # seconds a load generator may take to start: the CPU window begins after it
_TEN_YEARS_MS = 10 * 365 * 86400 * 1000
UNPACED = {"ELOVA_PACE_REFUSALS_AFTER": "0"}


@dataclass(frozen=True)
class Flood:
    name: str
    request: Request
    status: str  # the answer every request of this flood should get
    cpu_target: bool  # whether the CPU-a-refusal target applies


@dataclass
class Run:
    results: list[Result]
    cpu_per_second: float  # server CPU seconds a second during the measured window


def _cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def together(pid: int, jobs: list[Job]) -> Run:
    """Run the load generators at once (a process each); the server's CPU rate is read
    inside their common measured window."""
    procs = []
    for each in jobs:
        with tempfile.TemporaryFile() as stdin:
            stdin.write(msgspec.json.encode(each))
            stdin.seek(0)
            procs.append(
                subprocess.Popen(
                    python("-m", "tests.bench.loadgen"),
                    cwd=ROOT,
                    stdin=stdin,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                )
            )
    warmup, duration = jobs[0].warmup_seconds, jobs[0].duration_seconds
    time.sleep(warmup + _LAG)
    cpu_before, started = _cpu_seconds(pid), time.monotonic()
    time.sleep(max(0.5, duration - _LAG))
    cpu_after, ended = _cpu_seconds(pid), time.monotonic()
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=warmup + duration + 120)
        if proc.returncode != 0:
            raise RuntimeError(f"load generator failed: {err.decode()[-2000:]}")
        results.append(msgspec.json.decode(out, type=Result))
    return Run(results, (cpu_after - cpu_before) / (ended - started))


def _spend_budget(prefix: str, approval_id: object) -> None:
    """Empty the approval's token bucket (deep in debt), stamped ten years ahead: never
    refilled, and every refusal names a next token hours away."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        seconds, micros = client.time()
        ahead = seconds * 1000 + micros // 1000 + _TEN_YEARS_MS
        key = f"{prefix}{{limits}}:approval:{approval_id}"
        # Far in debt as well: with the bench's raised per-minute budget an empty bucket
        # would be due a token within a millisecond, unlike an approval of a real budget
        # whose refusals all say "retry in seconds".
        client.hset(key, mapping={"tokens": "-1e15", "ts": str(ahead)})
        client.pexpire(key, 3_600_000)  # gone an hour later: the admission script never sets
        # an expiry on a refusal, and this prefix is used by no other run
    finally:
        client.close()


def _bad_signature(token: str) -> str:
    """The token with the first four characters of its signature altered. Not the last
    four: the last character of a 64-byte signature carries 2 bits, and one of its other
    values is a non-canonical encoding that pyjwt refuses as malformed before any
    signature check (a quarter of the tokens)."""
    head, _, signature = token.rpartition(".")
    altered = "".join("B" if c == "A" else "A" for c in signature[:4])
    return f"{head}.{altered}{signature[4:]}"


def _without_auth(request: Request) -> Request:
    headers = {k: v for k, v in request.headers.items() if k != "Authorization"}
    return Request(request.path, headers, request.body)


def _oversized(request: Request, limit: int) -> Request:
    pad = "x" * (limit + 8 * 1024)
    body = request.body[:-1] + f',"padding":"{pad}"}}'
    return Request(request.path, request.headers, body)


def _answers(result: Result) -> str:
    total = sum(result.statuses.values())
    return ", ".join(
        f"{status} {100 * n / total:.0f}%" for status, n in sorted(result.statuses.items())
    )


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _mark(ok: bool) -> str:
    return "yes" if ok else "**no**"


async def prepare_flood(
    settings: Settings,
) -> tuple[Dataset, Config, scenarios.Access, scenarios.Access]:
    """The data set, the service's configuration, the good approval and the flooding one
    (an approval of its own, whose rate budget the flood spends)."""
    data, cfg, access = await prepare(settings)
    conn = await asyncpg.connect(data.dsn)
    try:
        flooder = await scenarios.grant(conn, cfg, data.account_email, data.workspace_id)
    finally:
        await conn.close()
    return data, cfg, access, flooder


async def run(settings: Settings, before: str | None = None) -> str:
    data, cfg, access, flooder = await prepare_flood(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-floods-"))
    port, n = cfg.port, settings.concurrency
    seconds = min(settings.duration, MAX_SECONDS)
    prefix = new_redis_prefix()
    env = service_env(data.dsn, port, REDIS_URL, prefix, cfg.signing_key_pem)
    arguments = {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE}
    tokens = TokenService(cfg)
    caller = access.caller

    def good(connections: int = n) -> Job:
        request = scenarios.tool_call(access.token(), TOOL, arguments)
        return job(port, [request], concurrency=connections, warmup_seconds=WARMUP_SECONDS,
                   duration_seconds=seconds, expect=EXPECT)  # fmt: skip

    expired, _ = tokens.issue_access_token(
        account_id=caller.account_id, client_id=access.client_id, scopes=caller.scopes,
        approval_id=caller.approval_id, generation=caller.generation, now=time.time() - 3600,
    )  # fmt: skip
    garbage = secrets.token_urlsafe(300)

    def call(token: str) -> Request:
        return scenarios.tool_call(token, TOOL, arguments)

    def flood_job(flood: Flood) -> Job:
        return job(port, [flood.request], concurrency=n, warmup_seconds=WARMUP_SECONDS,
                   duration_seconds=seconds)  # fmt: skip

    oversized = _oversized(call(access.token()), cfg.limits.max_body_bytes)
    floods = [
        Flood("rate budget spent (429)", call(flooder.token()), "429", True),
        Flood("expired token (401)", call(expired), "401", True),
        Flood("bad signature (401)", call(_bad_signature(access.token())), "401", True),
        Flood("garbage bearer (401)", call(garbage), "401", True),
        Flood("no token (401)", _without_auth(call(access.token())), "401", True),
        Flood(f"oversized body, {len(oversized.body):,} bytes (413)", oversized, "413", False),
    ]  # fmt: skip
    rows: list[Row] = []
    raw_env = {**env, **UNPACED}
    floor_port = free_port()
    floor_command = python("-m", "tests.bench.reference", "refusal", "--port", str(floor_port))
    floor_job = job(floor_port, [call(expired)], concurrency=n,
                    warmup_seconds=WARMUP_SECONDS, duration_seconds=seconds)  # fmt: skip

    def unpaced(label: str, pid: int, flood: Flood, floor_pid: int) -> tuple[Run, Run, Run, Run]:
        """Solo, beside the good load, alone, and the floor right after."""
        _say(f"floods{label}: {flood.name} on {n} connections beside the good load (and alone) …")
        flooding = flood_job(flood)
        solo = together(pid, [good()])
        both, alone = together(pid, [good(), flooding]), together(pid, [flooding])
        return solo, both, alone, together(floor_pid, [floor_job])

    with running("aiohttp-refusal", floor_command, floor_port, env, logs) as floor_server:
        with running(
            "elova-floods", python("-m", "service", "serve"), port, raw_env, logs
        ) as server:
            _spend_budget(prefix, flooder.caller.approval_id)
            for flood in floods:
                solo, both, alone, floor = unpaced("", server.pid, flood, floor_server.pid)
                rows.append(Row(flood, solo, both, alone, floor=floor))
        if before is not None:
            with checkout(before) as tree:
                old_env = {**raw_env, "PYTHONPATH": str(tree)}
                with running(
                    "elova-before", python("-m", "service", "serve"), port, old_env, logs, cwd=tree
                ) as server:
                    for row in rows:
                        solo, both, alone, row.before_floor = unpaced(
                            f" ({before})", server.pid, row.flood, floor_server.pid
                        )
                        row.before = (solo, both, alone)
    with running("elova-paced", python("-m", "service", "serve"), port, env, logs) as server:
        for row in rows:
            _say(f"floods, paced: {row.flood.name} beside the good load …")
            row.paced_solo = together(server.pid, [good()])
            row.paced = together(server.pid, [good(), flood_job(row.flood)])
        _say(f"floods: {IDLE_CONNECTIONS} idle keep-alive connections beside the good load …")
        idle_solo = together(server.pid, [good()])
        idle, held, still_open = _beside_idle(server.pid, port, good())
    # Overload is the load shedding's case: these replicas run with its settings at their
    # defaults (the runs above keep it off, as every other bench server does).
    overloads = []
    for label, extra in (("pacing off", UNPACED), ("as shipped, pacing on", {})):
        shedding = {k: v for k, v in env.items() if not k.startswith("ELOVA_SHED_")}
        with running(
            "elova-overload", python("-m", "service", "serve"), port, {**shedding, **extra}, logs
        ) as server:
            _say(f"floods: overload ({label}), {OVERLOAD_FACTOR * n} connections (and {n}) …")
            overload_solo = together(server.pid, [good()])
            overload = together(server.pid, [good(OVERLOAD_FACTOR * n)]).results[0]
        overloads.append(_overload_line(label, n, overload_solo.results[0], overload))
    shutil.rmtree(logs, ignore_errors=True)
    idle_share = idle.rps / idle_solo.results[0].rps
    lines = [
        f"## Floods on one replica: the good approval on {n} connections "
        f"(`tools/call {TOOL}`, 50 rows), a flood on {n} more, {seconds:.0f} s a run, "
        "each beside a run of the good approval alone just before it",
        "",
        _flood_table(rows),
        "",
        _floor_line([row.floor for row in rows if row.floor is not None]),
        "",
        f"{IDLE_CONNECTIONS} idle keep-alive connections ({still_open} of {held} still open "
        f"at the end) beside the good load: {idle.rps:.0f} of {idle_solo.results[0].rps:.0f} "
        f"req/s = **{idle_share:.2f}** (≥ 0.90: {_mark(idle_share >= IDLE_SHARE_TARGET)}).",
        "",
        *overloads,
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Row:
    flood: Flood
    solo: Run  # the good approval alone, just before (pacing off)
    both: Run  # the good approval and the flood (pacing off)
    flood_alone: Run  # the flood alone: the server's CPU a refusal, with nothing to subtract
    paced_solo: Run | None = None  # the same two with pacing at its defaults
    paced: Run | None = None
    before: tuple[Run, Run, Run] | None = None  # solo, both, alone against an older commit
    floor: Run | None = None  # the bare aiohttp refusal, right after flood_alone
    before_floor: Run | None = None  # the same, right after the older commit's flood alone


def _refusal_rate(result: Result) -> float:
    return sum(result.statuses.values()) / result.seconds


def _costs(solo: Run, both: Run, alone: Run) -> tuple[float, float, float, float, float]:
    """refusals/s beside the good load, the good share, CPU a refusal side by side and
    alone (seconds), refusals/s alone."""
    good_alone, (good_result, flood_result) = solo.results[0], both.results
    cpu_a_good = solo.cpu_per_second / max(good_alone.rps, 1.0)
    refusals = _refusal_rate(flood_result)
    share = good_result.rps / good_alone.rps
    cpu = (both.cpu_per_second - good_result.rps * cpu_a_good) / max(refusals, 1.0)
    only_rate = _refusal_rate(alone.results[0])
    return refusals, share, cpu, alone.cpu_per_second / max(only_rate, 1.0), only_rate


def _flood_table(rows: list[Row]) -> str:
    with_before = all(row.before is not None for row in rows)
    head = "| flood | answers "
    rule = "| --- | --- "
    if with_before:
        head += "| before: good ÷ alone | before: CPU a refusal, ms, alone | before: ÷ floor "
        rule += "| ---: | ---: | ---: "
    head += (
        "| pacing off: refusals/s | good ÷ alone "
        "| server CPU a refusal, ms: side by side / flood alone (< 0.1) "
        "| **÷ floor (≤ 2)** "
        "| pacing on: refusals/s | **good ÷ alone (≥ 0.75)** | met |"
    )
    rule += "| ---: | ---: | ---: | ---: | ---: | ---: | :-: |"
    lines = [head, rule]
    for row in rows:
        assert row.paced is not None and row.paced_solo is not None
        refusals, share, cpu, cpu_alone, only_rate = _costs(row.solo, row.both, row.flood_alone)
        flood_result, only = row.both.results[1], row.flood_alone.results[0]
        paced_good, paced_flood = row.paced.results
        paced_share = paced_good.rps / row.paced_solo.results[0].rps
        expected = all(
            r.statuses.get(row.flood.status, 0) == sum(r.statuses.values())
            for r in (flood_result, only, paced_flood)
        )
        target = row.flood.cpu_target
        over_floor = cpu_alone / _floor_cpu(row.floor) if row.floor is not None else float("nan")
        ok = (
            expected
            and paced_share >= FLOOD_SHARE_TARGET
            and (not target or cpu_alone * 1000 < CPU_TARGET_MS)
            and over_floor <= FLOOR_TARGET
        )
        cpu_text = f"{cpu * 1000:.3f} / {cpu_alone * 1000:.3f} ({only_rate:,.0f}/s)" + (
            "" if target else " (no target)"
        )
        note = f"; {flood_result.reconnects} reconnects" if flood_result.reconnects else ""
        cells = f"| {row.flood.name} | {_answers(flood_result)}{note} "
        if row.before is not None and with_before:
            _, old_share, _, old_alone, old_rate = _costs(*row.before)
            old_answers = _answers(row.before[2].results[0])
            old_floor = (
                old_alone / _floor_cpu(row.before_floor)
                if row.before_floor is not None
                else float("nan")
            )
            cells += (
                f"| {old_share:.2f} | {old_alone * 1000:.3f} ({old_rate:,.0f}/s; {old_answers}) "
                f"| {old_floor:.2f}× "
            )
        cells += (
            f"| {refusals:,.0f} | {share:.2f} | {cpu_text} | **{over_floor:.2f}×** "
            f"| {_refusal_rate(paced_flood):,.0f} | **{paced_share:.2f}** | {_mark(ok)} |"
        )
        lines.append(cells)
    return "\n".join(lines)


def _floor_cpu(floor: Run) -> float:
    """Server CPU seconds a refusal of the bare aiohttp server."""
    return floor.cpu_per_second / max(_refusal_rate(floor.results[0]), 1.0)


def _floor_line(floors: list[Run]) -> str:
    costs = sorted(_floor_cpu(floor) * 1000 for floor in floors)
    rates = sorted(_refusal_rate(floor.results[0]) for floor in floors)
    return (
        f"The floor on this machine: bare aiohttp answering the expired-token flood with one "
        f"precomputed 401 (no middleware, no parsing), measured right after each flood-alone "
        f"run ({len(costs)} times): {costs[0]:.3f}–{costs[-1]:.3f} ms of server CPU a refusal, "
        f"median **{costs[len(costs) // 2]:.3f} ms** ({rates[len(rates) // 2]:,.0f}/s); each "
        "row's ÷ floor is against the floor read right after it."
    )


def _overload_line(label: str, n: int, alone: Result, overload: Result) -> str:
    total = sum(overload.statuses.values())
    shed = overload.statuses.get("503", 0)
    p99_ratio = overload.p99_ms / alone.p99_ms if alone.p99_ms else float("nan")
    retry = (
        "n/a: nothing shed" if not shed
        else f"{100 * overload.retry_after_503 / shed:.0f}% of them with Retry-After"
    )  # fmt: skip
    return (
        f"Overload ({label}), {OVERLOAD_FACTOR * n} connections of the good approval (the "
        f"replica serves {n}): admitted {overload.rps:.0f} req/s (alone on {n}: {alone.rps:.0f}), "
        f"admitted p99 **{overload.p99_ms:.1f} ms** against {alone.p99_ms:.1f} ms alone = "
        f"**{p99_ratio:.2f}×** (target ≤ 2×: "
        f"{'met' if p99_ratio <= OVERLOAD_P99_TARGET else '**not met**'}); shed with 503: "
        f"**{100 * shed / max(total, 1):.1f}%** of {total} answers ({retry}); answers: "
        f"{_answers(overload)}."
    )


def _beside_idle(pid: int, port: int, good_job: Job) -> tuple[Result, int, int]:
    holder = subprocess.Popen(
        python("-m", "tests.bench.holder", str(port), str(IDLE_CONNECTIONS)), cwd=ROOT,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdin is not None and holder.stdout is not None
    try:
        held = int(holder.stdout.readline().split()[1])
        result = together(pid, [good_job]).results[0]
    finally:
        holder.stdin.close()
    still_open = int(holder.stdout.readline().split()[1])
    holder.wait(timeout=30)
    return result, held, still_open


def main(settings: Settings, before: str | None = None) -> str:
    return asyncio.run(run(settings, before))
