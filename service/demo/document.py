"""The demo snapshot that `make run` loads: `demo_snapshot(seed, now)` builds the document.

The document is the snapshot file format (docs/snapshot-format.md). It is deterministic for a seed
and a `now`; record ids depend on the seed alone, so loading it again later updates the same
records with fresher times. What it contains is described in docs/decisions/demo.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from service.demo import workspace_records
from service.demo.cast import DEMO_EMAIL, DEMO_PASSWORD, WORKSPACES
from service.demo.deterministic import Json, truncate_ms
from service.demo.execution_records import (
    Scope,
    number_sources,
    odd_executions,
    workflow_executions,
)

DEFAULT_SEED = 2026

__all__ = ["DEFAULT_SEED", "DEMO_EMAIL", "DEMO_PASSWORD", "demo_snapshot", "demo_workspace_ids"]


def demo_workspace_ids(seed: int = DEFAULT_SEED) -> list[str]:
    """The ids of the workspaces the demo account belongs to."""
    return workspace_records.demo_workspace_ids(seed)


def demo_snapshot(seed: int = DEFAULT_SEED, now: datetime | None = None) -> Json:
    """The whole demo as one snapshot document, with times relative to `now`."""
    now = truncate_ms(now or datetime.now(UTC))
    doc: Json = {
        "accounts": workspace_records.accounts(seed),
        "workspaces": [],
        "instances": [],
        "syncJobs": [],
        "workflows": [],
        "executions": [],
    }
    for ws in WORKSPACES:
        doc["workspaces"].append(workspace_records.workspace(seed, ws))
        zone = ZoneInfo(ws.zone)
        for index, plan in enumerate(ws.instances):
            inst_id = workspace_records.instance_id(seed, ws.key, index)
            jobs = workspace_records.sync_jobs(seed, inst_id, plan, now)
            inst = workspace_records.instance(seed, ws.key, index, plan, now, jobs)
            workflows = [
                (wplan, workspace_records.workflow(seed, ws.key, index, wplan, inst, now))
                for wplan in plan.workflows
            ]
            until = now
            if plan.status == "error" and inst["lastExecutionSyncAt"]:
                until = datetime.fromisoformat(inst["lastExecutionSyncAt"])
            scope = Scope(seed, ws, zone, plan, inst, now, until)
            rows = []
            for wplan, wf in workflows:
                if wplan.tracked:
                    rows += workflow_executions(scope, wplan, wf)
            rows += odd_executions(scope, [wf for p, wf in workflows if p.tracked])
            number_sources(scope, rows)
            doc["instances"].append(inst)
            doc["syncJobs"] += jobs
            doc["workflows"] += [wf for _, wf in workflows]
            doc["executions"] += rows
    return doc
