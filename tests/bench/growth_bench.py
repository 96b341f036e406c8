"""How cost grows (issue 23): the per-tool latency table (tests/bench/tool_latency.py) on three
data sets side by side, so that the growth with data and with tenants shows in one table:

- the smaller set: 1M executions in one workspace (`elova_bench_1m`; quick: 50k);
- the main set: the bench's own (`elova_bench`, 10M; quick: `elova_bench_quick`, 200k);
- the worst case an approval allows: the smaller set's executions spread over 50 workspaces
  (the most one approval may include), the approval holding all 50 and the busiest one
  queried (`elova_bench_tenants`; quick: `elova_bench_quick_tenants`).

One replica a data set, all three running; every row measures each set in turn (sequential
calls, a few seconds each), so load from the rest of the machine falls on the three alike.
The sets are generated once (tests/bench/dataset.py) and reused by later runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from service.auth.approvals import MAX_WORKSPACES
from tests.bench import dataset, scenarios, tool_latency
from tests.bench.loadgen import Result
from tests.bench.scale import QUICK, Settings, loadavg, prepare
from tests.bench.servers import RssSampler, python, running, service_env
from tests.bench.tool_latency import Case, ms
from tests.support.services import REDIS_URL, new_redis_prefix


@dataclass(frozen=True)
class DataSet:
    label: str
    settings: Settings


def data_sets(settings: Settings) -> list[DataSet]:
    """The smaller, the main and the many-tenant set of this run (quick or full)."""
    if settings.database == QUICK.database:
        smaller = dataclasses.replace(
            settings, database="elova_bench_quick_50k", executions=50_000, workflows=60,
            instances=3,
        )  # fmt: skip
        tenants_name, tenant_workflows = "elova_bench_quick_tenants", 200
    else:
        smaller = dataclasses.replace(
            settings, database="elova_bench_1m", executions=1_000_000, workflows=200, instances=4
        )
        tenants_name, tenant_workflows = "elova_bench_tenants", 400
    tenants = dataclasses.replace(
        smaller, database=tenants_name, workflows=tenant_workflows, instances=2 * MAX_WORKSPACES,
        workspaces=MAX_WORKSPACES,
    )  # fmt: skip
    return [
        DataSet(size(smaller.executions), smaller),
        DataSet(size(settings.executions), settings),
        DataSet(f"{MAX_WORKSPACES} workspaces", tenants),
    ]


def size(executions: int) -> str:
    if executions >= 1_000_000 and executions % 1_000_000 == 0:
        return f"{executions // 1_000_000}M"
    if executions >= 1_000 and executions % 1_000 == 0:
        return f"{executions // 1_000}k"
    return f"{executions:,}"


@dataclass
class Prepared:
    set: DataSet
    data: dataset.Dataset
    port: int
    env: dict[str, str]
    access: scenarios.Access
    cases: dict[str, Case]
    queried: int  # executions of the queried (busiest) workspace


async def _prepare(data_set: DataSet) -> Prepared:
    data, cfg, access = await prepare(data_set.settings)
    env = service_env(data.dsn, cfg.port, REDIS_URL, new_redis_prefix(), cfg.signing_key_pem)
    found = await tool_latency.cases(data, access)
    conn = await asyncpg.connect(data.dsn)
    try:
        queried = await conn.fetchval(
            "SELECT count(*) FROM executions WHERE workspace_id = $1", access.workspace_id
        )
    finally:
        await conn.close()
    return Prepared(data_set, data, cfg.port, env, access, {c.key: c for c in found}, queried)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run(settings: Settings) -> str:
    prepared = [await _prepare(s) for s in data_sets(settings)]
    load_at_start = loadavg()
    logs = Path(tempfile.mkdtemp(prefix="elova-growth-"))
    keys = list(dict.fromkeys(k for p in prepared for k in p.cases))
    results: dict[str, list[Result | None]] = {}
    command = python("-m", "service", "serve")
    with ExitStack() as stack:
        samplers = []
        for p in prepared:
            server = stack.enter_context(running(p.set.label, command, p.port, p.env, logs))
            samplers.append(stack.enter_context(RssSampler(server.pid)))
        for key in keys:
            row: list[Result | None] = []
            for p in prepared:
                case = p.cases.get(key)
                result = None
                if case is not None:
                    result = tool_latency.run(p.port, p.access, case, settings.tool_seconds)
                    tool_latency.say(f"{key} at {p.set.label}", result)
                row.append(result)
            results[key] = row
        peaks = [s.peak_kib for s in samplers]
    shutil.rmtree(logs, ignore_errors=True)
    loads = f"{load_at_start} at the start, {loadavg()} at the end"
    return _report(settings, prepared, keys, results, peaks, loads)


def _report(
    settings: Settings,
    prepared: list[Prepared],
    keys: list[str],
    results: dict[str, list[Result | None]],
    peaks: list[int],
    loads: str,
) -> str:
    small, main, tenants = (p.set.label for p in prepared)
    labels = ", ".join(p.set.label for p in prepared)
    lines = [
        f"## How cost grows: per-tool latency at {labels} (sequential calls, "
        f"{settings.tool_seconds:.0f} s each; every row measures the three sets in turn)",
        "",
    ]
    for p in prepared:
        d = p.data
        spread = (
            "in one workspace"
            if len(d.workspace_ids) <= 1
            else f"over {len(d.workspace_ids)} workspaces, the approval holding all of them; "
            f"the busiest is queried ({p.queried:,} executions)"
        )
        lines.append(
            f"- **{p.set.label}**: `{p.set.settings.database}`, {d.executions:,} executions, "
            f"{d.workflows} workflows, {d.instances} instances {spread}; peak RSS of its "
            f"replica {peaks[prepared.index(p)] / 1024:.0f} MiB."
        )
    lines += [
        "",
        f"| tool call | {small} p50 / p99 ms | {main} p50 / p99 ms | {tenants} p50 / p99 ms "
        f"| p50 {main} ÷ {small} | p50 {tenants} ÷ {small} | p99 target ms | met | errors |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | :-: | ---: |",
    ]
    for key in keys:
        row = results[key]
        cases = [p.cases.get(key) for p in prepared]
        target = next((c.target_ms for c in cases if c is not None), None)
        cells = [_cell(r, c) for r, c in zip(row, cases, strict=True)]
        missed = [
            p.set.label
            for p, r in zip(prepared, row, strict=True)
            if r is not None and target is not None and r.p99_ms >= target
        ]
        met = "" if target is None else ("yes" if not missed else f"**no** ({', '.join(missed)})")
        errors = sum(r.errors for r in row if r is not None)
        lines.append(
            f"| {key} | {' | '.join(cells)} | {_growth(row[1], row[0])} "
            f"| {_growth(row[2], row[0])} | {'' if target is None else f'< {target:.0f}'} "
            f"| {met} | {errors} |"
        )
    lines += [
        "",
        "A deep page is page 5000 of 50 rows, or the last full page of a smaller selection "
        "(its number is in the cell). The growth columns divide p50s: 1.0 is flat. "
        f"1-minute load average {loads} (compare columns, not runs).",
    ]
    return "\n".join(lines) + "\n"


def _cell(result: Result | None, case: Case | None) -> str:
    if result is None or case is None:
        return "—"
    page = f" (p. {case.page})" if case.page is not None else ""
    return f"{ms(result.p50_ms)} / {ms(result.p99_ms)}{page}"


def _growth(result: Result | None, base: Result | None) -> str:
    if result is None or base is None or not base.p50_ms:
        return "—"
    return f"{result.p50_ms / base.p50_ms:.2f}×"


def main(settings: Settings) -> str:
    return asyncio.run(run(settings))


if __name__ == "__main__":
    from tests.bench import scale

    sys.stdout.write(main(scale.QUICK if "--quick" in sys.argv[1:] else scale.FULL))
