"""Demo executions of one instance: months of runs per workflow, plus the awkward rows.

Volumes are skewed per workflow and grow towards `now`; scheduled workflows fire at a fixed
local hour; the others arrive weighted to local working hours. Besides ordinary rows an
instance can have executions of workflows that were never retained (`workflowId` null),
undated ones, and live ones (running, new, waiting). No instant of a row is after its
`observedAt`, and node runs lie inside their execution's window (tests/demo/timelines.py).
Costs: rows older than 90 days predate pricing (no `cost`), 75–90 days have `cost: null`,
newer AI rows are priced; the newest minutes are still `pending`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from service.demo.cast import (
    CHAT_MODEL_TYPES,
    TEMPLATES,
    InstancePlan,
    Template,
    WorkflowPlan,
    WorkspacePlan,
)
from service.demo.deterministic import (
    Json,
    iso,
    local_instant,
    local_today,
    stable_rng,
    stable_uuid,
)
from service.demo.history_reports import Outcome, report, unavailable
from service.demo.usage import Call, cost_fields, model_call

ORPHAN_NAMES = (
    "My workflow 3",
    "Test webhook (copy)",
    "Untitled workflow",
    "Quick CSV import",
    "Old invoice reminder",
)
UNPRICED_DAYS = 90
NULL_COST_DAYS = 75
MISSING_MAPPING_DAYS = 30
# Executions per day are the cast's rates times this: thousands of rows that still load
# in a few seconds.
VOLUME = 0.35


@dataclass(frozen=True)
class Scope:
    seed: int
    workspace: WorkspacePlan
    zone: ZoneInfo
    plan: InstancePlan
    instance: Json
    now: datetime
    until: datetime  # newest instant the collector has seen for this instance


def _status(rng: random.Random, template: Template) -> str:
    draw = rng.random()
    fail = template.failure_rate
    for status, share in (
        ("error", fail * 0.85),
        ("crashed", fail * 0.15),
        ("canceled", 0.012),
        ("waiting", 0.05 if template.waits else 0.0),
        ("unknown", 0.003),
        ("new", 0.002),
    ):
        if draw < share:
            return status
        draw -= share
    return "success"


def _event_times(
    rng: random.Random, scope: Scope, plan: WorkflowPlan, template: Template
) -> list[datetime]:
    today = local_today(scope.now, scope.zone)
    active = max(plan.days - plan.ended_days_ago, 1)
    if template.schedule_hour is not None:
        every = 7 if template.name.startswith(("Summarize weekly", "Weekly")) else 1
        return [
            local_instant(
                today - timedelta(days=d),
                template.schedule_hour * 3600 + rng.uniform(0.05, 2.5),
                scope.zone,
            )
            for d in range(plan.ended_days_ago + 1, plan.days + 1, every)
        ]
    count = round(template.per_day * VOLUME * active * rng.uniform(0.85, 1.15))
    times = []
    for _ in range(count):
        day = plan.ended_days_ago + int(active * rng.random() ** 1.3)
        if rng.random() < 0.15:
            seconds = rng.uniform(0, 86_400)
        else:
            seconds = rng.triangular(6.5 * 3600, 21 * 3600, 11 * 3600)
        at = local_instant(today - timedelta(days=day), seconds, scope.zone)
        if at > scope.until - timedelta(seconds=30):
            at -= timedelta(days=1)
        times.append(at)
    return times


def _observed(rng: random.Random, scope: Scope, seen: datetime) -> datetime:
    delay = timedelta(seconds=rng.uniform(3, scope.workspace.poll_seconds * 1.2))
    return min(seen + delay, scope.now - timedelta(milliseconds=500))


def _row(scope: Scope, wf: Json | None, name: str, source_wf: str, key: object) -> Json:
    return {
        "id": stable_uuid(scope.seed, "execution", scope.instance["id"], key),
        "instanceId": scope.instance["id"],
        "workflowId": None if wf is None else wf["id"],
        "workflowName": name,
        "sourceId": "",  # numbered per instance once all rows exist
        "sourceWorkflowId": source_wf,
        "status": "success",
        "startedAt": None,
        "createdAt": None,
        "stoppedAt": None,
        "observedAt": iso(scope.now),
        "sourceMissing": False,
    }


def _dated(
    rng: random.Random, scope: Scope, row: Json, started: datetime, status: str, total_ms: int
) -> None:
    end = started + timedelta(milliseconds=total_ms)
    stopped: datetime | None = end
    if status in ("running", "waiting", "new") or end > scope.now - timedelta(seconds=1):
        status = status if status in ("waiting", "new") else "running"
        stopped = None
    age_days = (scope.now - started).total_seconds() / 86_400
    created = started - timedelta(milliseconds=rng.randint(2, 40))
    row["status"] = status
    row["startedAt"] = None if status == "new" else iso(started)
    row["createdAt"] = None if age_days > 100 and rng.random() < 0.3 else iso(created)
    row["stoppedAt"] = None if stopped is None else iso(stopped)
    row["observedAt"] = iso(_observed(rng, scope, stopped or started))
    row["sourceMissing"] = age_days > 60 and rng.random() < 0.04


def _costs(scope: Scope, row: Json, calls: list[Call], age_days: float) -> None:
    if age_days > UNPRICED_DAYS:
        return  # collected before reference pricing existed: no cost fields at all
    if age_days > NULL_COST_DAYS:
        row["cost"] = None
        return
    fields = cost_fields(
        calls,
        pending=age_days * 86_400 < 600,
        with_missing_mapping=age_days <= MISSING_MAPPING_DAYS,
    )
    row.update(fields)


def _wants_history(rng: random.Random, status: str, ai: bool) -> bool:
    if status in ("error", "crashed"):
        return rng.random() < 0.6
    if status in ("success", "canceled"):
        return rng.random() < (0.12 if ai else 0.02)
    return False


def workflow_executions(scope: Scope, plan: WorkflowPlan, wf: Json) -> list[Json]:
    template = TEMPLATES[plan.template]
    rng = stable_rng(scope.seed, "executions", wf["id"])
    rows = []
    for n, started in enumerate(sorted(_event_times(rng, scope, plan, template))):
        row = _row(scope, wf, wf["name"], wf["sourceId"], (wf["id"], n))
        status = _status(rng, template)
        # At least 1 ms: a run that fails starts before the execution stops.
        total_ms = max(1, int(template.median_ms * rng.lognormvariate(0, 0.5)))
        if status == "error":
            total_ms = max(1, int(total_ms * rng.uniform(0.1, 0.9)))
        _dated(rng, scope, row, started, status, total_ms)
        calls: list[Call] = []
        if template.model is not None and row["status"] != "new":
            calls_n = rng.randint(*template.calls) - (1 if row["status"] == "error" else 0)
            calls = [model_call(rng, template.model) for _ in range(max(calls_n, 0))]
        age_days = (scope.now - started).total_seconds() / 86_400
        if template.model is not None:
            _costs(scope, row, calls, age_days)
        if _wants_history(rng, row["status"], template.model is not None):
            row["history"] = _history(rng, scope, row, wf, calls, started, total_ms, age_days)
        rows.append(row)
    return rows


def _history(
    rng: random.Random,
    scope: Scope,
    row: Json,
    wf: Json,
    calls: list[Call],
    started: datetime,
    total_ms: int,
    age_days: float,
) -> Json:
    observed = datetime.fromisoformat(row["observedAt"])
    if age_days > 100 and rng.random() < 0.5:
        return unavailable(observed, expired=True)
    if not wf["nodes"] or (row["status"] == "success" and rng.random() < 0.04):
        return unavailable(observed, expired=False)
    outcome = Outcome(
        status=row["status"],
        started=started,
        total_ms=total_ms,
        observed=observed,
        old=age_days > 100,
        big_batch=rng.random() < 0.03,
    )
    version_id = stable_uuid(scope.seed, "version", wf["id"], int(age_days // 14))
    return report(rng, wf["nodes"], calls, outcome, version_id)


def odd_executions(scope: Scope, workflows: list[Json]) -> list[Json]:
    """Orphans, undated and live rows of one instance. None is dated after its observedAt
    (nor after `now`): a row "from the future" would contradict its own observation."""
    rng = stable_rng(scope.seed, "odd", scope.instance["id"])
    rows = []
    for n in range(scope.plan.orphans):
        name = ORPHAN_NAMES[n % len(ORPHAN_NAMES)]
        row = _row(scope, None, name, f"gone{n % len(ORPHAN_NAMES):012d}", ("orphan", n))
        started = scope.until - timedelta(days=rng.uniform(0.05, 110))
        _dated(
            rng,
            scope,
            row,
            started,
            rng.choice(("success", "success", "error")),
            rng.randint(200, 5000),
        )
        rows.append(row)
    tracked: list[Json | None] = [wf for wf in workflows if wf["nodes"]] or [None]
    for n in range(scope.plan.undated):
        wf = tracked[n % len(tracked)]
        row = _row(
            scope,
            wf,
            wf["name"] if wf else ORPHAN_NAMES[0],
            wf["sourceId"] if wf else "gone000000000000",
            ("undated", n),
        )
        row["status"] = "unknown"
        row["observedAt"] = iso(scope.now - timedelta(days=rng.uniform(0.5, 20)))
        row["sourceMissing"] = n % 2 == 0
        rows.append(row)
    rows += _live(rng, scope, tracked)
    return rows


def _live(rng: random.Random, scope: Scope, tracked: list[Json | None]) -> list[Json]:
    """A connected instance is busy right now: two running rows and a queued one."""
    if scope.plan.status != "connected" or tracked == [None]:
        return []
    rows = []
    for n, status in enumerate(("running", "running", "new")):
        wf = tracked[n % len(tracked)]
        assert wf is not None
        row = _row(scope, wf, wf["name"], wf["sourceId"], ("live", n))
        started = scope.now - timedelta(seconds=rng.uniform(3, 50))
        row["status"] = status
        row["createdAt"] = iso(started - timedelta(milliseconds=12))
        row["startedAt"] = None if status == "new" else iso(started)
        row["observedAt"] = iso(scope.now - timedelta(seconds=1))
        if any(node["type"] in CHAT_MODEL_TYPES for node in wf["nodes"]):
            # Valuation runs after collection: an execution this fresh is still pending.
            row.update(cost_fields([], pending=True, with_missing_mapping=True))
        rows.append(row)
    return rows


def number_sources(scope: Scope, rows: list[Json]) -> None:
    """n8n execution ids count up per instance in the order executions were created."""
    rng = stable_rng(scope.seed, "source-ids", scope.instance["id"])
    base = rng.randint(1_000, 60_000)
    order = sorted(
        rows, key=lambda r: (r["createdAt"] or r["startedAt"] or r["observedAt"], r["id"])
    )
    for n, row in enumerate(order):
        row["sourceId"] = str(base + n)
