"""The segment statement of get_execution_stats (service/store/reads/stats.py), its plan
before and after the LATERAL form, side by side on the bench's data sets: for each set and
period, EXPLAIN (ANALYZE, BUFFERS) of both statements with the same arguments, in
interleaved rounds, printing execution time, rows removed by filters and buffers.

    .venv/bin/python -m tests.bench.stats_plans [--rounds 5] [--plans]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
from datetime import UTC, datetime
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg

from service.rules.periods import buckets_for
from service.store.reads import stats

DSN = "postgresql://postgres@127.0.0.1:5432/"
SETS = ("elova_bench_1m", "elova_bench", "elova_bench_tenants")
PERIODS = ("today", "7d", "30d", "all")

# The statement before (a plain join of the segments to the rollups).
_OLD_SIGNED = ", ".join(f"sum(r.sign * x.{name}) AS {name}" for name in stats._FIELDS)
OLD = f"""
SELECT x.seg, {stats._ROLLUP_SUMS}
  FROM (SELECT r.seg, {_OLD_SIGNED}
          FROM unnest($2::timestamptz[], $3::timestamptz[], $4::int[], $5::int[])
               AS r(lo, hi, seg, sign)
          JOIN execution_rollups x ON x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi
         GROUP BY r.seg
        UNION ALL
        SELECT r.seg, {_OLD_SIGNED}
          FROM unnest($6::timestamptz[], $7::timestamptz[], $8::int[], $9::int[])
               AS r(lo, hi, seg, sign)
          JOIN execution_rollups_daily x
            ON x.workspace_id = $1 AND x.slot >= r.lo AND x.slot < r.hi
         GROUP BY r.seg) x
 GROUP BY x.seg
"""
NEW = stats._SEGMENTS


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(n for child in node.get("Plans", []) for n in _walk(child))]


def summary(plan: dict[str, Any]) -> dict[str, Any]:
    nodes = _walk(plan["Plan"])
    return {
        "ms": plan["Execution Time"],
        "removed": sum(
            int(n.get("Rows Removed by Filter", 0)) + int(n.get("Rows Removed by Join Filter", 0))
            for n in nodes
        ),
        "buffers": plan["Plan"].get("Shared Hit Blocks", 0)
        + plan["Plan"].get("Shared Read Blocks", 0),
        "scans": sorted({n["Node Type"] for n in nodes if "Scan" in n["Node Type"]}),
    }


async def arguments(conn: asyncpg.Connection, period: str) -> tuple[UUID, list[Any]]:
    workspace_id = await conn.fetchval(
        "SELECT workspace_id FROM execution_rollups_daily GROUP BY 1 ORDER BY sum(executions)"
        " DESC LIMIT 1"
    )
    zone_name = await conn.fetchval("SELECT time_zone FROM workspaces WHERE id = $1", workspace_id)
    first = await conn.fetchval(stats._FIRST_DATED, workspace_id)
    as_of = datetime.now(UTC)
    starts = buckets_for(period, as_of, ZoneInfo(zone_name), first).starts
    edge = stats.micros(as_of) // stats.SLOT_US * stats.SLOT_US
    return workspace_id, stats.segment_arguments(starts, edge)


async def explain(conn: asyncpg.Connection, sql: str, args: list[Any]) -> dict[str, Any]:
    text = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + sql, *args)
    plan: dict[str, Any] = json.loads(text)[0]
    return plan


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--plans", action="store_true", help="print the text plans too")
    options = parser.parse_args()
    print(
        "| data set | period | segments | before ms (median) | after ms | before rows removed"
        " | after | before buffers | after | before scans | after scans |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for name in SETS:
        conn = await asyncpg.connect(DSN + name)
        try:
            for period in PERIODS:
                workspace_id, args = await arguments(conn, period)
                full = [workspace_id, *args]
                if await conn.fetch(OLD, *full) != await conn.fetch(NEW, *full):
                    raise SystemExit(f"{name} {period}: the two statements disagree")
                runs: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
                for _ in range(options.rounds):
                    runs["old"].append(summary(await explain(conn, OLD, full)))
                    runs["new"].append(summary(await explain(conn, NEW, full)))
                o, n = runs["old"][-1], runs["new"][-1]
                ms = {k: statistics.median(r["ms"] for r in v) for k, v in runs.items()}
                print(
                    f"| {name} | {period} | {len(args[0]) + len(args[4])} | {ms['old']:.1f} |"
                    f" {ms['new']:.1f} | {o['removed']} | {n['removed']} | {o['buffers']} |"
                    f" {n['buffers']} | {', '.join(o['scans'])} | {', '.join(n['scans'])} |"
                )
                if options.plans:
                    for label, sql in (("before", OLD), ("after", NEW)):
                        rows = await conn.fetch("EXPLAIN (ANALYZE, BUFFERS) " + sql, *full)
                        plan = "\n".join(r[0] for r in rows)
                        print(f"\n{name} {period} {label}:\n{re.sub(r'(?m)^', '    ', plan)}\n")
        finally:
            await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
