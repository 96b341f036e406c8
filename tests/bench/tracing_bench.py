"""The tracing line of `make bench` (issue 22): `tools/call get_many_executions` throughput
and server CPU a call of one replica with tracing off, on at 1% (parentbased_traceidratio
0.01) and on at 100% (parentbased_always_on), rounds interleaved in one run, every traced
replica exporting over OTLP/HTTP to a local sink that answers and discards
(tests/support/otlp.py). Targets:
off within noise of today, 1% at most 3% slower, 100% at most 15% slower.

    python -m tests.bench --tracing-only [--quick] [--rounds N] [--duration S]
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
from pathlib import Path

from tests.bench import scale, scenarios
from tests.bench.loadgen import Request, Result
from tests.bench.servers import CpuAccount, job, load, python, running, service_env
from tests.support.otlp import OtlpReceiver
from tests.support.services import REDIS_URL, new_redis_prefix

WARMUP_SECONDS = 1.0
LEAST_ROUNDS = 5  # interleaved rounds: the medians compare like with like on a busy machine
# (label, sampler, target: at most this much slower than off)
WAYS = (
    ("off (no OTEL_* variable)", None, None),
    ("on, 1% (parentbased_traceidratio 0.01)", ("parentbased_traceidratio", "0.01"), 0.03),
    ("on, 100% (parentbased_always_on)", ("parentbased_always_on", ""), 0.15),
)


def _env(
    base: dict[str, str], sink: OtlpReceiver, sampler: tuple[str, str] | None
) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("OTEL_")}
    if sampler is None:
        return env
    name, argument = sampler
    env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": sink.endpoint, "OTEL_TRACES_SAMPLER": name,
                "OTEL_SERVICE_NAME": "elova-mcp-bench"})  # fmt: skip
    if argument:
        env["OTEL_TRACES_SAMPLER_ARG"] = argument
    return env


def section(
    env: dict[str, str], port: int, logs: Path, access: scenarios.Access,
    *, concurrency: int, duration: float, rounds: int,
) -> list[str]:  # fmt: skip
    def request() -> Request:  # a fresh token a run: they live 5 minutes, the section longer
        return scenarios.tool_call(
            access.token(), "get_many_executions",
            {"workspaceId": str(access.workspace_id), "limit": scenarios.PAGE},
        )  # fmt: skip

    results: dict[str, list[Result]] = {label: [] for label, _, _ in WAYS}
    cpu: dict[str, list[float]] = {label: [] for label in results}
    exports: dict[str, int] = dict.fromkeys(results, 0)
    with OtlpReceiver(keep=False) as sink:
        for _ in range(rounds):
            for label, sampler, _target in WAYS:
                before = sink.requests
                serve = python("-m", "service", "serve")
                way = _env(env, sink, sampler)
                with running("elova-tracing-bench", serve, port, way, logs) as server, \
                        CpuAccount(server.pid) as account:  # fmt: skip
                    result = load(job(
                        port, [request()], concurrency=concurrency,
                        warmup_seconds=WARMUP_SECONDS, duration_seconds=duration,
                        expect='"isError":false'))  # fmt: skip
                results[label].append(result)
                calls = result.rps * (duration + WARMUP_SECONDS)
                cpu[label].append(account.per_call_ms(calls)["server"])
                exports[label] += sink.requests - before  # SIGTERM flushes the batch queue
    return _report(results, cpu, exports, concurrency, duration, rounds)


def _report(
    results: dict[str, list[Result]], cpu: dict[str, list[float]], exports: dict[str, int],
    concurrency: int, duration: float, rounds: int,
) -> list[str]:  # fmt: skip
    off = statistics.median(r.rps for r in results[WAYS[0][0]])
    off_cpu = statistics.median(cpu[WAYS[0][0]])
    lines = [
        f"## Tracing: `get_many_executions` (50 rows), {concurrency} concurrent connections, "
        f"{duration:.0f} s, {rounds} interleaved round(s), spans to a local OTLP/HTTP sink",
        "",
        "| tracing | req/s (median; rounds) | p50 ms | p99 ms | errors | req/s ÷ off "
        "| server CPU a call, ms (median; rounds) | CPU ÷ off | OTLP exports | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for label, _sampler, target in WAYS:
        runs = results[label]
        middle = sorted(runs, key=lambda r: r.rps)[(len(runs) - 1) // 2]
        share = middle.rps / off
        spent = statistics.median(cpu[label])
        cost = spent / off_cpu
        verdict = "(the reference)"
        if target is not None:
            met = cost <= 1 + target
            verdict = f"≤ {target:.0%} slower: {'met' if met else '**missed**'}"
        each = ", ".join(f"{r.rps:.0f}" for r in runs)
        each_cpu = ", ".join(f"{c:.2f}" for c in cpu[label])
        lines.append(
            f"| {label} | {middle.rps:.0f} ({each}) | {middle.p50_ms:.1f} | {middle.p99_ms:.1f} "
            f"| {sum(r.errors for r in runs)} | {share:.3f} | {spent:.3f} ({each_cpu}) "
            f"| {cost:.3f} | {exports[label]} | {verdict} |"
        )
    lines += [
        "",
        "- The verdict is on the server's CPU a call (its exporter thread included): a "
        "saturated replica's throughput is its inverse, and unlike req/s it does not move "
        "with what else runs on the machine's cores. req/s is shown as measured.",
        "- Off: the tracing SDK is not imported; the request path reads one module attribute "
        "a hook (service/observability/tracing/). Compare its line with the scale section's "
        "`ours`.",
    ]
    return lines


def main(settings: scale.Settings) -> str:
    """The section on the benchmark's data set, its approval made anew."""
    data, cfg, access = asyncio.run(scale.prepare(settings))
    logs = Path(tempfile.mkdtemp(prefix="elova-bench-tracing-"))
    env = service_env(data.dsn, cfg.port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    try:
        lines = section(
            env, cfg.port, logs, access, concurrency=settings.concurrency,
            duration=settings.duration, rounds=max(settings.rounds, LEAST_ROUNDS),
        )  # fmt: skip
    finally:
        shutil.rmtree(logs, ignore_errors=True)
    return "\n".join(lines) + "\n"
