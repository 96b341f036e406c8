"""Query plans and statistics timings on a big data set (not a test: issue 6's plan check).

    python -m tests.tools.scale_plans --dsn postgresql://postgres@127.0.0.1:5432/elova_bench
        [--verbose] [--raw] [--only NAME]

For every execution-page statement shape (filters, `failed`, periods, deep keyset
positions, rare statuses) it prints the server execution time of EXPLAIN (ANALYZE, BUFFERS)
under a custom and a forced generic plan (asyncpg prepares every statement, so the generic
plan is what a busy connection runs); `--verbose` prints the plans. Then the statistics
counts from the rollups per zone and period (30 calls each), and with `--raw` the raw
aggregation they must equal, timed once.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg

from service.store.reads.executions import page_query
from service.store.reads.stats import raw_counts, rollup_counts


async def pages(conn: asyncpg.Connection, args: argparse.Namespace) -> None:
    ws = await conn.fetchval("SELECT workspace_id FROM executions LIMIT 1")
    inst = await conn.fetchval("SELECT id FROM instances WHERE workspace_id = $1 LIMIT 1", ws)
    by_size = "SELECT workflow_id FROM workflow_execution_summaries ORDER BY total_executions"
    big = await conn.fetchval(by_size + " DESC LIMIT 1")
    small = await conn.fetchval(by_size + " LIMIT 1")
    owner = "SELECT instance_id FROM workflows WHERE id = $1"
    big_inst, small_inst = await conn.fetchval(owner, big), await conn.fetchval(owner, small)
    now = await conn.fetchval("SELECT max(sort_at) FROM executions WHERE workspace_id = $1", ws)
    deep_row = await conn.fetchrow(
        "SELECT sort_at, id FROM executions WHERE workspace_id = $1"
        " ORDER BY sort_at DESC, id DESC OFFSET 250000 LIMIT 1",
        ws,
    )
    deep = (deep_row["sort_at"], deep_row["id"])
    d30, d7 = (now - timedelta(days=30), now), (now - timedelta(days=7), now)
    cases: dict[str, dict[str, tuple[Any, ...]]] = {
        "unfiltered": {},
        "unfiltered, deep": {"after": deep},
        "failed": {"failed": ()},
        "failed, deep": {"failed": (), "after": deep},
        "crashed": {"status": ("crashed",)},
        "new (190 rows), deep": {"status": ("new",), "after": deep},
        "30d": {"window": d30},
        "30d, deep": {"window": d30, "after": deep},
        "7d failed": {"failed": (), "window": d7},
        "waiting 30d": {"status": ("waiting",), "window": d30},
        "instance": {"instance": (inst,)},
        "instance failed": {"instance": (inst,), "failed": ()},
        "instance crashed, deep": {"instance": (inst,), "status": ("crashed",), "after": deep},
        "instance new 30d": {"instance": (inst,), "status": ("new",), "window": d30},
        "instance failed 30d, deep": {
            "instance": (inst,),
            "failed": (),
            "window": d30,
            "after": deep,
        },  # fmt: skip
        "workflow (busiest)": {"workflow": (big,)},
        "workflow (smallest)": {"workflow": (small,)},
        "workflow failed": {"workflow": (big,), "failed": ()},
        "workflow failed 30d": {"workflow": (big,), "failed": (), "window": d30},
        "workflow new": {"workflow": (big,), "status": ("new",)},
        "instance + workflow failed": {
            "instance_check": (big_inst,),
            "workflow": (big,),
            "failed": (),
        },  # fmt: skip
        "instance + small workflow 30d": {
            "instance_check": (small_inst,),
            "workflow": (small,),
            "window": d30,
        },  # fmt: skip
    }
    print("| statement | custom plan ms | generic plan ms |\n| --- | ---: | ---: |")
    for name, filters in cases.items():
        if args.only and args.only not in name:
            continue
        query, arguments = page_query(dict(filters), 51)
        times, plans = [], []
        for mode in ("auto", "force_generic_plan"):
            await conn.execute(f"SET plan_cache_mode = {mode}")
            stmt = await conn.prepare("EXPLAIN (ANALYZE, BUFFERS) " + query)
            for _ in range(3):
                rows = await stmt.fetch(ws, *arguments)
            plan = "\n".join(r[0] for r in rows)
            times.append(next(line for line in plan.splitlines() if "Execution Time" in line))
            plans.append(plan)
        print(f"| {name} | {times[0].split()[2]} | {times[1].split()[2]} |")
        if args.verbose:
            print("```\n" + plans[1] + "\n```")
    await conn.execute("SET plan_cache_mode = auto")


async def stats(conn: asyncpg.Connection, args: argparse.Namespace) -> None:
    ws = await conn.fetchval("SELECT workspace_id FROM executions LIMIT 1")
    now = datetime.now(UTC)
    await conn.execute("SET jit = off")  # as get_execution_stats does
    print("\n| zone | period | rollups p50 ms | max of 30 ms | raw ms | equal |")
    print("| --- | --- | ---: | ---: | ---: | :-: |")
    for zone_name in ("Asia/Kathmandu", "Europe/Berlin"):
        zone = ZoneInfo(zone_name)
        for period in ("today", "7d", "30d", "all"):
            times = []
            for _ in range(30):
                began = time.perf_counter()
                async with conn.transaction(isolation="repeatable_read"):
                    rolled = await rollup_counts(conn, ws, period, now, zone)
                times.append((time.perf_counter() - began) * 1000)
            times.sort()
            raw_ms, equal = "", ""
            if args.raw:
                began = time.perf_counter()
                async with conn.transaction(isolation="repeatable_read"):
                    raw = await raw_counts(conn, ws, period, now, zone)
                raw_ms = f"{(time.perf_counter() - began) * 1000:.0f}"
                equal = "yes" if raw == rolled else "**NO**"
            print(f"| {zone_name} | {period} | {times[14]:.1f} | {times[-1]:.1f} | {raw_ms} "
                  f"| {equal} |")  # fmt: skip


async def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.scale_plans")
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--raw", action="store_true")
    parser.add_argument("--only")
    args = parser.parse_args()
    conn = await asyncpg.connect(args.dsn)
    try:
        await pages(conn, args)
        if not args.only:
            await stats(conn, args)
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
