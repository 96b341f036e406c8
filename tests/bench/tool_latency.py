"""The per-tool latency cases of the bench (issue 6): every tool, the list filters first and
deep page (page 5000, or the last full page), statistics of each period, sampled single
rows; each measured by sequential calls (one at a time: the server-side cost plus a loopback
round trip) for a few seconds. tests/bench/growth_bench.py runs them on each data set.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import asyncpg

from tests.bench import dataset, scenarios
from tests.bench.loadgen import Result
from tests.bench.servers import job, load

# (p99 target in ms) of each scenario family: issue 6.
LIST_P99, STATS_P99, ONE_P99 = 25.0, 100.0, 10.0
EXPECT = '"isError":false'


@dataclass(frozen=True)
class Case:
    """One row of the table: a tool called with each of `arguments` in turn."""

    key: str  # the same on every data set (a deep page's number is in `page`)
    tool: str
    arguments: list[dict[str, Any]]
    target_ms: float | None
    page: int | None = None  # the deep page a cursor reaches on this data set


async def cases(data: dataset.Dataset, access: scenarios.Access) -> list[Case]:
    ws = str(access.workspace_id)
    conn = await asyncpg.connect(data.dsn)
    try:
        top_workflow = await conn.fetchval(
            "SELECT workflow_id FROM workflow_execution_summaries s JOIN workflows w"
            " ON w.id = s.workflow_id WHERE w.workspace_id = $1"
            " ORDER BY total_executions DESC LIMIT 1",
            access.workspace_id,
        )
        instance = await conn.fetchval(
            "SELECT id FROM instances WHERE workspace_id = $1 ORDER BY name LIMIT 1",
            access.workspace_id,
        )
        executions = await scenarios.sample_ids(conn, "executions", access.workspace_id, 200)
        with_history = await conn.fetch(
            "SELECT id FROM executions TABLESAMPLE SYSTEM (1) WHERE workspace_id = $1"
            " AND history IS NOT NULL LIMIT 100",
            access.workspace_id,
        )
        workflows = await scenarios.sample_ids(conn, "workflows", access.workspace_id, 100)
        lists: dict[str, dict[str, Any]] = {
            "unfiltered": {},
            "status=failed": {"status": "failed"},
            "period=30d": {"period": "30d"},
            "workflowId (busiest)": {"workflowId": str(top_workflow)},
            "instanceId": {"instanceId": str(instance)},
        }
        out: list[Case] = []
        many = "get_many_executions"
        for label, extra in lists.items():
            args = {"workspaceId": ws, "limit": scenarios.PAGE, **extra}
            out.append(Case(f"{many} {label}, page 1", many, [args], LIST_P99))
            deep = await scenarios.deep_cursor(conn, access, args)
            if deep is not None:
                cursor, page = deep
                key = f"{many} {label}, deep page"
                out.append(Case(key, many, [{**args, "cursor": cursor}], LIST_P99, page))
    finally:
        await conn.close()
    for period in ("today", "7d", "30d", "all"):
        target = STATS_P99 if period in ("30d", "all") else None
        stats = {"workspaceId": ws, "period": period, "timeZone": access.time_zone}
        out.append(Case(f"get_execution_stats {period}", "get_execution_stats", [stats], target))
    one = "get_execution"
    rows = [{"workspaceId": ws, "executionId": e} for e in executions]
    out.append(Case(f"{one} (sampled rows)", one, rows, ONE_P99))
    if with_history:
        rows = [{"workspaceId": ws, "executionId": str(r["id"])} for r in with_history]
        out.append(Case(f"{one} (rows with history)", one, rows, ONE_P99))
    workflow_args = [{"workspaceId": ws, "workflowId": w} for w in workflows]
    out += [
        Case("get_workflow", "get_workflow", workflow_args, ONE_P99),
        Case("get_many_workflows page 1", "get_many_workflows", [{"workspaceId": ws}], LIST_P99),
        Case("get_many_workspaces", "get_many_workspaces", [{}], None),
        Case("get_workspace", "get_workspace", [{"workspaceId": ws}], None),
        Case("get_many_instances", "get_many_instances", [{"workspaceId": ws}], None),
        Case(
            "get_many_sync_jobs",
            "get_many_sync_jobs",
            [{"workspaceId": ws, "instanceId": str(instance)}],
            None,
        ),
    ]
    return out


def run(port: int, access: scenarios.Access, case: Case, seconds: float) -> Result:
    """Sequential calls of one case for `seconds` (after a short warm-up)."""
    token = access.token()
    requests = [
        scenarios.tool_call(token, case.tool, args, request_id=i)
        for i, args in enumerate(case.arguments)
    ]
    return load(job(port, requests, warmup_seconds=0.3, duration_seconds=seconds, expect=EXPECT))


def say(label: str, result: Result) -> None:
    errors = f" ERRORS {result.first_error}" if result.errors else ""
    print(
        f"  {label}: p50 {ms(result.p50_ms)} ms, p99 {ms(result.p99_ms)} ms{errors}",
        file=sys.stderr,
        flush=True,
    )


def ms(value: float) -> str:
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"
