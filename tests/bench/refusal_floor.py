"""Refusals against a same-work floor: `python -m tests.bench --floor-only` (a section of
`make bench`).

Ours (the shipped profile, refusal pacing off) refuses an expired token (401) and a spent
rate budget (429); beside it, two floors answer the same request bytes: the bare aiohttp
floor (`tests.bench.reference refusal`: one precomputed 401, the body read and dropped) and
the same-work floor (`tests.bench.reference samework`: it reads the body and parses the
JSON-RPC envelope with our transport's own function, mints a request id and sends the
answer our server gave to that request, status, headers and body byte for byte). What ours
spends beyond the same-work floor is the cost of a refusal beyond the contract.

CPU a refusal: the server process's user + system CPU over the measured window ÷ the
refusals it answered; the server pinned alone on core 1, the load generator on core 0
(tests/bench/profiles_bench.py). The 401 is measured on 16 connections; the 429 on one
connection and on 16. Rounds interleaved; median (min–max).
"""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from service.auth.tokens import TokenService
from tests.bench import scenarios
from tests.bench.floods import UNPACED, _spend_budget, prepare_flood
from tests.bench.loadgen import Request
from tests.bench.profiles_bench import SERVER_CORE, cpu_seconds, pinned, pinned_load
from tests.bench.reference import ANSWER_VARIABLE, Answer
from tests.bench.scale import Settings
from tests.bench.servers import SHIPPED, free_port, job, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

TOOL = "get_many_executions"
ROUNDS = 5
SAME_WORK_TARGET = 1.5  # a 401's CPU ÷ the same-work floor's, at most (issue 40)
OURS, SAME_WORK, BARE = "ours (shipped)", "same-work floor", "bare aiohttp floor"


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    request: Request
    status: str
    connections: int


def capture(port: int, request: Request) -> Answer:
    """Our server's answer to `request`, for the same-work floor to send."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", request.path, body=request.body.encode(), headers=request.headers)
        response = conn.getresponse()
        body = response.read().decode("utf-8")
        return Answer(response.status, list(response.getheaders()), body)
    finally:
        conn.close()


def refusal_cpu_ms(
    argv: list[str], port: int, env: dict[str, str], logs: Path, case: Case, seconds: float
) -> float:
    """CPU a refusal of a fresh server refusing `case` (ms)."""
    with running("refusals", pinned(SERVER_CORE, argv), port, env, logs) as server:
        work = job(port, [case.request], concurrency=case.connections, warmup_seconds=0.0,
                   duration_seconds=seconds)  # fmt: skip
        pinned_load(msgspec.structs.replace(work, duration_seconds=1.0))
        before = cpu_seconds(server.pid)
        result = pinned_load(work)
        used = cpu_seconds(server.pid) - before
    refused = result.statuses.get(case.status, 0)
    others = sum(result.statuses.values()) - refused
    if not refused or others:
        raise RuntimeError(f"{case.name}: answers {result.statuses}, want only {case.status}")
    return 1000 * used / refused


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}–{max(values):.3f})"


async def run(settings: Settings, rounds: int = ROUNDS) -> str:
    seconds = min(settings.duration, 4.0)
    data, cfg, access, flooder = await prepare_flood(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-refusal-floor-"))
    prefix = new_redis_prefix()
    env = {**service_env(data.dsn, cfg.port, REDIS_URL, prefix, cfg.signing_key_pem, SHIPPED),
           **UNPACED}  # fmt: skip
    _spend_budget(prefix, flooder.caller.approval_id)
    caller = access.caller
    expired, _ = TokenService(cfg).issue_access_token(
        account_id=caller.account_id, client_id=access.client_id, scopes=caller.scopes,
        approval_id=caller.approval_id, generation=caller.generation, now=time.time() - 3600,
    )  # fmt: skip
    arguments = {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE}
    spent = scenarios.tool_call(flooder.token(), TOOL, arguments)
    cases = [
        Case("expired token (401), 16 connections", scenarios.tool_call(expired, TOOL, arguments),
             "401", settings.concurrency),
        Case("rate budget spent (429), 1 connection", spent, "429", 1),
        Case("rate budget spent (429), 16 connections", spent, "429", settings.concurrency),
    ]  # fmt: skip
    serve = python("-m", "service", "serve")
    with running("refusals-capture", serve, cfg.port, env, logs):
        answers = {case.status: capture(cfg.port, case.request) for case in cases}
    floor_port, same_port = free_port(), free_port()
    bare = python("-m", "tests.bench.reference", "refusal", "--port", str(floor_port))
    same = python("-m", "tests.bench.reference", "samework", "--port", str(same_port))
    cpu: dict[tuple[str, str], list[float]] = {}
    for number in range(rounds):
        for case in cases if number % 2 == 0 else cases[::-1]:
            same_env = {**env, ANSWER_VARIABLE: msgspec.json.encode(answers[case.status]).decode()}
            contenders = [(OURS, serve, cfg.port, env), (SAME_WORK, same, same_port, same_env)]
            if case.status == "401":
                contenders.append((BARE, bare, floor_port, env))
            for name, argv, port, its_env in contenders:
                print(f"refusal floor: {case.name}, {name}, round {number + 1} …",
                      file=sys.stderr, flush=True)  # fmt: skip
                ms = refusal_cpu_ms(argv, port, its_env, logs, case, seconds)
                cpu.setdefault((case.name, name), []).append(ms)
    shutil.rmtree(logs, ignore_errors=True)
    return _report(cases, cpu, rounds, seconds)


def _report(
    cases: list[Case], cpu: dict[tuple[str, str], list[float]], rounds: int, seconds: float
) -> str:
    lines = [
        f"## Refusals against the same-work floor: {rounds} interleaved rounds of {seconds:.0f} s",
        "",
        "Server CPU a refusal, ms, median (min–max); the server alone on core 1. "
        "Ratios: the median of the per-round ratios.",
        "",
        f"| refusal | {OURS} | {SAME_WORK} | {BARE} | ours ÷ same-work | ours ÷ bare "
        f"| target (401: ≤ {SAME_WORK_TARGET}× same-work) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | :-: |",
    ]
    for case in cases:
        ours = cpu[(case.name, OURS)]
        same = cpu[(case.name, SAME_WORK)]
        over_same = statistics.median(o / s for o, s in zip(ours, same, strict=True))
        bare = cpu.get((case.name, BARE))
        over_bare = (
            f"{statistics.median(o / b for o, b in zip(ours, bare, strict=True)):.2f}×"
            if bare
            else "—"
        )
        met = "—"
        if case.status == "401":
            met = "yes" if over_same <= SAME_WORK_TARGET else "**no**"
        lines.append(
            f"| {case.name} | {_spread(ours)} | {_spread(same)} "
            f"| {_spread(bare) if bare else '—'} | **{over_same:.2f}×** | {over_bare} | {met} |"
        )
    return "\n".join(lines) + "\n"


def main(settings: Settings, rounds: int = ROUNDS) -> str:
    return asyncio.run(run(settings, rounds))
