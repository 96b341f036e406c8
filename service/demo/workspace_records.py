"""Demo records around the executions: accounts, workspaces, instances with their sync jobs,
and workflows with their n8n node inventories.

An instance's sync fields (`lastSyncAt`, `syncState`, …) are derived from its generated
jobs, so what `get_many_instances` says agrees with what `get_many_sync_jobs` lists.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.demo.cast import (
    CODE,
    DEMO_EMAIL,
    DEMO_PASSWORD,
    HTTP,
    IF,
    OTHER_EMAIL,
    OTHER_PASSWORD,
    POSTGRES,
    SET,
    TEMPLATES,
    WORKSPACES,
    InstancePlan,
    NodeType,
    WorkflowPlan,
    WorkspacePlan,
)
from service.demo.deterministic import Json, iso, n8n_workflow_id, stable_rng, stable_uuid

TRANSIENT_CODES = (
    "N8N_RATE_LIMITED",
    "N8N_TIMEOUT",
    "N8N_UNAVAILABLE",
    "N8N_RESPONSE_INVALID",
    "N8N_DATA_LIMIT",
)
HISTORY_DAYS = 121  # every instance was connected this long ago (its initial sync)


def accounts(seed: int) -> list[Json]:
    return [
        {
            "id": account_id(seed, "demo"),
            "email": DEMO_EMAIL,
            "name": "Dana Demo",
            "password": DEMO_PASSWORD,
        },
        {
            "id": account_id(seed, "other"),
            "email": OTHER_EMAIL,
            "name": "Grace Globex",
            "password": OTHER_PASSWORD,
        },
    ]


def account_id(seed: int, who: str) -> str:
    return stable_uuid(seed, "account", who)


def workspace(seed: int, plan: WorkspacePlan) -> Json:
    members = []
    if plan.demo_role:
        members.append({"accountId": account_id(seed, "demo"), "role": plan.demo_role})
    if plan.other_role:
        members.append({"accountId": account_id(seed, "other"), "role": plan.other_role})
    return {
        "id": workspace_id(seed, plan.key),
        "name": plan.name,
        "timeZone": plan.zone,
        "executionPollIntervalSeconds": plan.poll_seconds,
        "members": members,
    }


def workspace_id(seed: int, key: str) -> str:
    return stable_uuid(seed, "workspace", key)


def demo_workspace_ids(seed: int) -> list[str]:
    """The workspaces the demo account is a member of, in catalog order."""
    return [workspace_id(seed, w.key) for w in WORKSPACES if w.demo_role]


# ---------------------------------------------------------------------------- sync jobs


@dataclass(frozen=True)
class JobShape:
    scope: str
    trigger: str
    status: str
    error: str | None


def _job_shape(rng: random.Random, plan: InstancePlan, i: int, count: int) -> JobShape:
    """The i-th newest job of an instance (i = 0 is the newest)."""
    if i == count - 1:
        return JobShape(
            "all", "initial", "queued" if plan.status == "pending" else "succeeded", None
        )
    if plan.status == "error" and i < 8:
        return JobShape("executions" if i % 3 else "all", "scheduled", "failed", plan.error_code)
    if plan.jobs > 100 and i == 0:
        return JobShape("all", "manual", "queued", None)
    if plan.jobs > 100 and i == 1:
        return JobShape("executions", "scheduled", "running", None)
    scope = "workflows" if i % 4 == 3 else "metadata" if i % 25 == 11 else "executions"
    trigger = "manual" if i % 17 == 5 else "scheduled"
    if i % 29 == 13:
        return JobShape(scope, "manual", "failed", "N8N_SYNC_CANCELLED")
    if rng.random() < 0.07:
        return JobShape(scope, trigger, "failed", rng.choice(TRANSIENT_CODES))
    return JobShape(scope, trigger, "succeeded", None)


def sync_jobs(seed: int, inst_id: str, plan: InstancePlan, now: datetime) -> list[Json]:
    rng = stable_rng(seed, "jobs", inst_id)
    count = max(plan.jobs, 1)
    # The >100-job instance syncs every 15 minutes; the others at their workflow interval.
    spacing = timedelta(minutes=15 if plan.jobs > 100 else plan.interval_minutes)
    jobs = []
    for i in range(count):
        shape = _job_shape(rng, plan, i, count)
        jitter = timedelta(seconds=rng.uniform(0, 40))
        if shape.trigger == "initial":
            created = now - timedelta(days=HISTORY_DAYS) + jitter
            if plan.status == "pending":
                created = now - timedelta(minutes=3) + jitter
        else:
            created = now - spacing * i - timedelta(seconds=20) - jitter
        took = timedelta(seconds=rng.uniform(1.5, 95 if shape.scope != "all" else 600))
        finished = None if shape.status in ("queued", "running") else created + took
        jobs.append(
            {
                "id": stable_uuid(seed, "job", inst_id, i),
                "instanceId": inst_id,
                "scope": shape.scope,
                "trigger": shape.trigger,
                "status": shape.status,
                "createdAt": iso(created),
                "finishedAt": None if finished is None else iso(min(finished, now)),
                "errorCode": shape.error,
            }
        )
    return jobs


def _newest_success(jobs: list[Json], scopes: tuple[str, ...]) -> str | None:
    for job in jobs:  # newest first
        if job["status"] == "succeeded" and job["scope"] in scopes:
            return str(job["finishedAt"])
    return None


def instance(
    seed: int, ws_key: str, index: int, plan: InstancePlan, now: datetime, jobs: list[Json]
) -> Json:
    newest = jobs[0]
    attempted = next((j for j in jobs if j["status"] != "queued"), None)
    return {
        "id": instance_id(seed, ws_key, index),
        "workspaceId": workspace_id(seed, ws_key),
        "name": plan.name,
        "status": plan.status,
        "autoSyncEnabled": plan.auto_sync,
        "workflowIntervalMinutes": plan.interval_minutes,
        "lastSyncAt": _newest_success(jobs, ("all", "workflows", "executions", "metadata")),
        "lastWorkflowSyncAt": _newest_success(jobs, ("all", "workflows")),
        "lastExecutionSyncAt": _newest_success(jobs, ("all", "executions")),
        "historyComplete": plan.history_complete,
        "workflowInventoryTruncated": plan.inventory_truncated,
        "syncState": {
            "pending": newest["status"] in ("queued", "running"),
            "scope": newest["scope"],
            "status": newest["status"],
            "errorCode": newest["errorCode"],
            "lastAttemptAt": None if attempted is None else attempted["createdAt"],
        },
    }


def instance_id(seed: int, ws_key: str, index: int) -> str:
    return stable_uuid(seed, "instance", ws_key, index)


# ---------------------------------------------------------------------------- workflows

MEGA_NODES = 1000


def _mega_nodes(rng: random.Random) -> list[tuple[str, NodeType]]:
    """A generated 1000-node mapping workflow: its inventory is far past 32 KiB."""
    entities = ("customer", "supplier", "article", "price_list", "warehouse", "cost_center")
    fields = (
        "id",
        "name",
        "vat_id",
        "billing_address.line1",
        "billing_address.city",
        "iban",
        "currency",
        "payment_terms",
        "tax_class",
        "updated_at",
        "status",
    )
    kinds: tuple[tuple[str, NodeType], ...] = (
        ("Map", SET),
        ("Validate", IF),
        ("Transform", CODE),
        ("Push", HTTP),
        ("Upsert", POSTGRES),
    )
    nodes: list[tuple[str, NodeType]] = []
    for n in range(1, MEGA_NODES):
        verb, kind = kinds[n % len(kinds)] if n % 7 else rng.choice(kinds)
        entity = entities[(n // len(fields)) % len(entities)]
        nodes.append((f"{verb} {entity}.{fields[n % len(fields)]} #{n:04d}", kind))
    return nodes


def workflow_nodes(seed: int, wf_id: str, key: str) -> list[Json]:
    template = TEMPLATES[key]
    rng = stable_rng(seed, "nodes", wf_id)
    named = list(template.nodes)
    if key == "erp_mega":
        named += _mega_nodes(rng)
    nodes = []
    for i, (name, (node_type, version)) in enumerate(named):
        disabled = name in template.disabled or (key == "erp_mega" and i % 97 == 50)
        nodes.append(
            {
                "id": stable_uuid(seed, "node", wf_id, i),
                "name": name,
                "type": node_type,
                "typeVersion": version,
                "disabled": disabled,
            }
        )
    return nodes


def workflow(
    seed: int, ws_key: str, inst_index: int, plan: WorkflowPlan, inst: Json, now: datetime
) -> Json:
    wf_id = workflow_id(seed, ws_key, inst_index, plan.template)
    rng = stable_rng(seed, "workflow", wf_id)
    ended = now - timedelta(days=plan.ended_days_ago)
    seen = inst["lastWorkflowSyncAt"] or iso(now - timedelta(minutes=5))
    record: Json = {
        "id": wf_id,
        "instanceId": inst["id"],
        "name": TEMPLATES[plan.template].name,
        "sourceId": n8n_workflow_id(seed, wf_id),
        "active": plan.active,
        "tracked": plan.tracked,
        "present": plan.lifecycle != "absent",
        "updatedAt": iso(ended - timedelta(days=rng.uniform(0.5, 30))),
        "observedAt": seen if plan.lifecycle != "absent" else iso(ended),
        "nodes": workflow_nodes(seed, wf_id, plan.template),
    }
    if plan.lifecycle == "archived":
        record["archived"] = True
    elif plan.lifecycle == "removed":
        record["definitionAvailable"] = False
        record["definitionRemovedAt"] = iso(ended)
        record["nodes"] = []  # the definition is gone: only the identity remains
    elif plan.lifecycle == "current" and ws_key == "kathmandu":
        record["archived"] = None  # that collector never established the flag
    elif plan.lifecycle == "current" and rng.random() < 0.5:
        # Newer collectors report both flags explicitly; older rows omit them.
        record["archived"] = False
        record["definitionAvailable"] = True
    return record


def workflow_id(seed: int, ws_key: str, inst_index: int, template: str) -> str:
    return stable_uuid(seed, "workflow", ws_key, inst_index, template)
