"""The overload line of `make bench` (issue 23): one replica at 4× overload with the adaptive
in-flight limit beside the fixed cap at several values, in one run, rounds interleaved.

`tools/call get_many_executions` (first page, 50 rows) from one approval (limits raised as in
the scale benchmark, Redis admission on, refusal pacing and lag shedding at their
defaults). The load generator retries a 503 at once (the worst client: one that ignores
`Retry-After`). Each round, on fresh replicas, in turn:

    single client   1 connection, adaptive admission: the latency the others are judged by
    unshed          N connections, shedding off: what the replica serves when saturated
    adaptive        4×N connections, ELOVA_SHED_ADMISSION=adaptive (the default)
    fixed K         4×N connections, ELOVA_SHED_ADMISSION=fixed, ELOVA_SHED_MAX_INFLIGHT=K

N is the bench's concurrency (16): the scale benchmark's throughput runs use it because one
replica is saturated there (req/s no longer grows with connections on 2 cores), so 4×N is
four times the load that saturates it. The medians over rounds give:

    admitted p99 ÷ single client's p99       target ≤ 2
    admitted req/s ÷ best fixed cap's req/s  target ≥ 0.90
    shed rate                                503s ÷ answers

Admitted p99 is read at the client and at the server: the replica runs in the shipped
profile (tests/bench/servers.py), whose access lines carry each request's `duration_ms`;
the 200s of /mcp logged in the measured window give the server-side p50/p99. The replica
runs pinned alone on core 1, the load generator on core 0 (tests/bench/profiles_bench.py):
always the Python one, which times the admitted answers alone and counts the 503s with
Retry-After (wrk, used by the CPU-a-call section where installed, times every answer).
The frontier: a fixed cap beats adaptive when its p99 is lower and its req/s higher, each
by more than 10 % (target: no such cap).

The adaptive replica's limit, window latency and baseline are read from its /metrics at the
end of each overload run.

    python -m tests.bench --overload-only [--quick] [--rounds N] [--duration S]
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.bench import scale, scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.profiles_bench import SERVER_CORE, pinned, pinned_load
from tests.bench.servers import SHIPPED, free_port, job, python, running, service_env
from tests.support.services import REDIS_URL, new_redis_prefix

FACTOR = 4
FIXED_CAPS = (2, 3, 4, 6, 10, 20)  # 20: today's default, 2 × the pool of 10
P99_TARGET = 2.0
THROUGHPUT_TARGET = 0.90
LEAST_ROUNDS = 2
FRONTIER_MARGIN = 1.10  # a fixed cap beats adaptive only by more than 10 % on both
WARMUP_SECONDS = 2.0  # the adaptive limit settles within a second (docs/decisions/floods.md)
ADAPTIVE = "adaptive"
SINGLE = "single client"
UNSHED = "unshed"
GAUGES = ("inflight_limit", "inflight_limit_latency_seconds", "inflight_limit_baseline_seconds")


@dataclass
class Runs:
    results: list[Result] = field(default_factory=list)
    gauges: list[dict[str, float]] = field(default_factory=list)
    server_ms: list[tuple[float, float]] = field(default_factory=list)  # p50, p99 at the server

    def median(self, pick: str) -> float:
        return float(statistics.median(float(getattr(r, pick)) for r in self.results))

    def server_p99(self) -> float:
        return float(statistics.median(p99 for _, p99 in self.server_ms))

    def shed_rate(self) -> float:
        shed = sum(r.statuses.get("503", 0) for r in self.results)
        return shed / max(1, sum(sum(r.statuses.values()) for r in self.results))

    def others(self) -> str:
        """Answers neither 200 nor 503, by status (expected: none)."""
        counts: dict[str, int] = {}
        for result in self.results:
            for status, n in result.statuses.items():
                if status not in ("200", "503"):
                    counts[status] = counts.get(status, 0) + n
        return ", ".join(f"{n} × {status}" for status, n in sorted(counts.items())) or "none"

    def shed_by_reason(self) -> str:
        """The 503s by the signal that shed them, summed over the runs (from /metrics)."""
        reasons: dict[str, float] = {}
        for gauges in self.gauges:
            for name, n in gauges.items():
                if name.startswith("shed_requests_total{"):
                    reason = name.partition('reason="')[2].rstrip('"}')
                    reasons[reason] = reasons.get(reason, 0.0) + n
        total = sum(reasons.values())
        return (
            ", ".join(
                f"{reason} {100 * n / total:.0f}%" for reason, n in sorted(reasons.items()) if n
            )
            or "none"
        )

    def retry_after(self) -> float:
        shed = sum(r.statuses.get("503", 0) for r in self.results)
        return sum(r.retry_after_503 for r in self.results) / shed if shed else 1.0


def _env(base: dict[str, str], label: str) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("ELOVA_SHED_")}
    if label == UNSHED:
        return {**env, "ELOVA_SHED_LOOP_LAG_MS": "0", "ELOVA_SHED_ADMISSION": "fixed",
                "ELOVA_SHED_MAX_INFLIGHT": "1000000"}  # fmt: skip
    if label in (ADAPTIVE, SINGLE):
        return {**env, "ELOVA_SHED_ADMISSION": "adaptive"}
    cap = label.removeprefix("fixed ")
    return {**env, "ELOVA_SHED_ADMISSION": "fixed", "ELOVA_SHED_MAX_INFLIGHT": cap}


def _scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    values = {}
    for line in text.splitlines():
        name, _, number = line.rpartition(" ")
        name = name.removeprefix("elova_mcp_")
        if name in GAUGES or name.startswith("shed_requests_total{"):
            values[name] = float(number)
    return values


def server_latencies(log: Path, since: float) -> tuple[float, float]:
    """p50 and p99 (ms) of the answered tools calls the access log holds from `since` on."""
    durations = []
    for raw in log.read_text(errors="replace").splitlines():
        if '"elova.access"' not in raw:
            continue
        line = json.loads(raw)
        if line.get("status") != 200 or line.get("path") != "/mcp":
            continue
        if datetime.fromisoformat(line["time"]).timestamp() >= since:
            durations.append(float(line["duration_ms"]))
    if not durations:
        return float("nan"), float("nan")
    durations.sort()
    return durations[len(durations) // 2], durations[
        min(len(durations) - 1, int(0.99 * len(durations)))
    ]


def section(
    base: dict[str, str], port: int, logs: Path, request: Callable[[], Request],
    *, concurrency: int, duration: float, rounds: int,
) -> str:  # fmt: skip
    labels = [SINGLE, UNSHED, ADAPTIVE, *(f"fixed {cap}" for cap in FIXED_CAPS)]
    runs = {label: Runs() for label in labels}
    for index in range(rounds):
        order = labels[2:][index % (len(labels) - 2) :] + labels[2:][: index % (len(labels) - 2)]
        for label in [SINGLE, UNSHED, *order]:
            connections = {SINGLE: 1, UNSHED: concurrency}.get(label, FACTOR * concurrency)
            metrics_port = free_port()
            env = {**_env(base, label), "ELOVA_METRICS_PORT": str(metrics_port)}
            print(f"overload, round {index + 1}: {label} on {connections} connections …",
                  file=sys.stderr, flush=True)  # fmt: skip
            serve = pinned(SERVER_CORE, python("-m", "service", "serve"))
            with running("elova-overload", serve, port, env, logs) as server:
                since = time.time() + WARMUP_SECONDS
                result = pinned_load(job(port, [request()], concurrency=connections,
                                         warmup_seconds=WARMUP_SECONDS, duration_seconds=duration,
                                         expect='"isError":false'), native=False)  # fmt: skip
                runs[label].results.append(result)
                runs[label].gauges.append(_scrape(metrics_port))
            runs[label].server_ms.append(server_latencies(server.log, since))
    return _report(runs, concurrency, duration, rounds)


def _server_p50(runs: Runs) -> float:
    return float(statistics.median(p50 for p50, _ in runs.server_ms))


def _report(runs: dict[str, Runs], n: int, duration: float, rounds: int) -> str:
    single = runs[SINGLE].median("p99_ms")
    fixed = [label for label in runs if label.startswith("fixed ")]
    best = max(fixed, key=lambda label: runs[label].median("rps"))
    best_rps = runs[best].median("rps")
    lines = [
        f"## Overload: one replica at {FACTOR}× ({FACTOR * n} connections; it saturates at "
        f"{n}), adaptive in-flight limit beside fixed caps ({rounds} rounds, {duration:.0f} s "
        "a run, medians; the client retries a 503 at once)",
        "",
        f"Single client: p99 **{single:.2f} ms** (p50 {runs[SINGLE].median('p50_ms'):.2f} ms, "
        f"{runs[SINGLE].median('rps'):.0f} req/s). Unshed on {n} connections: "
        f"{runs[UNSHED].median('rps'):.0f} req/s, p99 {runs[UNSHED].median('p99_ms'):.1f} ms.",
        "",
        f"Single client at the server: p50 {_server_p50(runs[SINGLE]):.2f} ms, "
        f"p99 {runs[SINGLE].server_p99():.2f} ms.",
        "",
        "| admission | admitted req/s | ÷ best fixed (≥ 0.90) | admitted p50 ms | p99 ms "
        "| **p99 ÷ single (≤ 2)** | server p99 ms | **server p99 ÷ single (≤ 2)** "
        "| shed (by signal) | 503s with Retry-After | other answers | limit at the end |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label in [ADAPTIVE, *fixed]:
        each = runs[label]
        rps, p99 = each.median("rps"), each.median("p99_ms")
        limit = statistics.median(g.get("inflight_limit", 0.0) for g in each.gauges)
        mark = " (best fixed)" if label == best else ""
        lines.append(
            f"| {label}{mark} | {rps:.0f} | {rps / best_rps:.2f} | {each.median('p50_ms'):.1f} "
            f"| {p99:.1f} | **{p99 / single:.2f}** | {each.server_p99():.1f} "
            f"| **{each.server_p99() / single:.2f}** | {100 * each.shed_rate():.0f}% "
            f"({each.shed_by_reason()}) "
            f"| {100 * each.retry_after():.0f}% | {each.others()} | {limit:.0f} |"
        )
    adaptive = runs[ADAPTIVE]
    p99_ratio = adaptive.median("p99_ms") / single
    share = adaptive.median("rps") / best_rps
    gauges = adaptive.gauges[-1]
    baseline = gauges.get("inflight_limit_baseline_seconds", float("nan")) * 1000
    window = gauges.get("inflight_limit_latency_seconds", float("nan")) * 1000
    met = p99_ratio <= P99_TARGET and share >= THROUGHPUT_TARGET
    server_ratio = adaptive.server_p99() / single
    beaten = [
        label for label in fixed
        if runs[label].median("p99_ms") * FRONTIER_MARGIN < adaptive.median("p99_ms")
        and runs[label].median("rps") > FRONTIER_MARGIN * adaptive.median("rps")
    ]  # fmt: skip
    frontier = "met" if not beaten else "**not met** (" + ", ".join(beaten) + ")"
    lines += [
        "",
        f"Adaptive: admitted p99 ÷ single client's p99 = **{p99_ratio:.2f}** (≤ {P99_TARGET:g}), "
        f"admitted throughput ÷ best fixed cap's ({best}) = **{share:.2f}** "
        f"(≥ {THROUGHPUT_TARGET:.2f}), shed rate **{100 * adaptive.shed_rate():.0f}%**: "
        f"{'met' if met else '**not met**'}. Its last run ended at a limit of "
        f"{gauges.get('inflight_limit', 0):.0f}, window p90 {window:.2f} ms against a "
        f"baseline of {baseline:.2f} ms.",
        "",
        f"Frontier: no fixed cap better than adaptive on both p99 and req/s by more than 10 %: "
        f"{frontier}. Server-side admitted p99 ÷ the single client's p99 = "
        f"**{server_ratio:.2f}** (≤ {P99_TARGET:g}) at **{share:.2f}** of the best cap's "
        f"throughput (≥ {THROUGHPUT_TARGET:.2f}): "
        f"{'met' if server_ratio <= P99_TARGET and share >= THROUGHPUT_TARGET else '**not met**'}.",
    ]
    return "\n".join(lines) + "\n"


async def run(settings: scale.Settings) -> str:
    data, cfg, access = await scale.prepare(settings)
    logs = Path(tempfile.mkdtemp(prefix="elova-overload-"))
    env = service_env(
        data.dsn, cfg.port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem, SHIPPED
    )

    def request() -> Request:  # a fresh token a run: they live 5 minutes
        return scenarios.tool_call(
            access.token(), "get_many_executions",
            {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE},
        )  # fmt: skip

    try:
        return section(
            env, cfg.port, logs, request, concurrency=settings.concurrency,
            duration=settings.duration, rounds=max(LEAST_ROUNDS, settings.rounds),
        )  # fmt: skip
    finally:
        shutil.rmtree(logs, ignore_errors=True)


def main(settings: scale.Settings) -> str:
    return asyncio.run(run(settings))
