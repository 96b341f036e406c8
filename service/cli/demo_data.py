"""`elova-mcp demo-data`: write a deterministic bulk data set for scale work and benchmarks.

    elova-mcp demo-data --workspaces N --instances N --workflows N --executions N --seed S
                        [--now RFC3339] [--jobs J] [--replace] [--database-url URL]

The same seed and `--now` always give the same records (times are relative to `--now`,
which defaults to the current second). Prints what it wrote and how to approve the bulk
account; exits 1 with one line on stderr when the data cannot be written.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime

import asyncpg

from service.cli.preflight import check_postgresql
from service.config import Config
from service.demo.bulk import BulkPlan
from service.demo.bulk_load import BulkReport, write_plan
from service.errors import BulkRefused

_PROG = "elova-mcp demo-data"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "demo-data",
        help="write a large deterministic data set (COPY) for scale tests and benchmarks",
        description="Generate realistic retained records straight into PostgreSQL.",
    )
    p.add_argument("--workspaces", type=_count, default=1, metavar="N")
    p.add_argument("--instances", type=_count, default=4, metavar="N")
    p.add_argument("--workflows", type=_count, default=200, metavar="N")
    p.add_argument("--executions", type=_count, default=1_000_000, metavar="N")
    p.add_argument("--seed", type=int, default=1, metavar="S")
    p.add_argument("--now", type=_instant, default=None, metavar="RFC3339",
                   help="the instant the data is relative to (default: now)")  # fmt: skip
    p.add_argument("--jobs", type=_count, default=2, metavar="J", help="copying processes")
    p.add_argument("--replace", action="store_true", help="rewrite this seed's workspaces")
    p.add_argument("--database-url", metavar="URL", help="default: ELOVA_DATABASE_URL")


def _count(raw: str) -> int:
    value = int(raw.replace("_", ""))
    if value < 0:
        raise argparse.ArgumentTypeError("must be a whole number >= 0")
    return value


def _instant(raw: str) -> datetime:
    try:
        value = datetime.fromisoformat(raw)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 instant: {raw!r}") from err
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError("the instant needs a UTC offset")
    return value.astimezone(UTC)


def run(args: argparse.Namespace) -> int:
    dsn = args.database_url or Config.from_env(need_key=False).database_url
    # A refusal is one line naming where the URL came from (service/cli/failures.py).
    setting = "--database-url" if args.database_url else "ELOVA_DATABASE_URL"
    asyncio.run(check_postgresql(dsn, setting))
    now = args.now or datetime.now(UTC).replace(microsecond=0)
    try:
        plan = BulkPlan(
            workspaces=args.workspaces,
            instances=args.instances,
            workflows=args.workflows,
            executions=args.executions,
            seed=args.seed,
            now=now,
        )
    except ValueError as err:
        sys.stderr.write(f"{_PROG}: {err}\n")
        return 2
    try:
        report = asyncio.run(write_plan(dsn, plan, jobs=args.jobs, replace=args.replace))
    except BulkRefused as err:
        sys.stderr.write(f"{_PROG}: {err}\n")
        return 1
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as err:
        sys.stderr.write(f"{_PROG}: database error: {type(err).__name__}: {err}\n")
        return 1
    sys.stdout.write(_summary(report, plan))
    return 0


def _summary(report: BulkReport, plan: BulkPlan) -> str:
    workspaces = " ".join(f"--workspace {w}" for w in report.workspace_ids[:50])
    return (
        f"wrote {len(report.workspace_ids)} workspaces, {report.instances} instances, "
        f"{report.workflows} workflows, {report.executions} executions "
        f"(seed {plan.seed}, now {plan.now.isoformat()}) in {report.seconds:.1f}s\n"
        f"account: {report.account_email} (password {report.account_password})\n"
        "approve it: elova-mcp approve "
        f"--account {report.account_email} {workspaces}\n"
    )
