"""Bulk retained data for scale work: `elova-mcp demo-data`.

`BulkPlan` says how many workspaces, instances, workflows and executions to make, from a
seed and a `now`; the same plan always gives the same records. Records come out in two
forms from one generator: **rows** for `COPY`, with every derived column computed by the
loader's own functions (`clean_nodes`, `bound_inventory`, `bound_history`), and **snapshot
records** (docs/snapshot-format.md), so tests can load the same data through the loader and
compare (tests/demo/test_bulk.py). Executions are generated in chunks of `CHUNK`, each from
a random stream of its own. Why chunks, and what "realistic" means with its shares:
docs/decisions/scale.md, "Bulk data".
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from statistics import NormalDist
from typing import Any

import msgspec

from service.demo.cast import MODELS, TEMPLATES, Template
from service.demo.deterministic import Json, n8n_workflow_id, stable_rng, stable_uuid
from service.demo.history_reports import Outcome, report, unavailable
from service.demo.usage import Call, cost_fields, priced_call, unreported_call
from service.demo.workspace_records import workflow_nodes
from service.rules.history import HistoryIn, bound_history
from service.rules.inventory import bound_inventory
from service.rules.shaping import format_amount, format_instant
from service.store.load_executions import COST_ABSENT, COST_NULL, COST_PRESENT
from service.store.load_inventory import NodeIn, clean_nodes

CHUNK = 50_000
ZONES = ("Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Australia/Sydney", "UTC")
ORPHAN_NAMES = ("My workflow 3", "Untitled workflow", "Test webhook (copy)", "Old CSV import")
ORPHAN_SHARE = 0.01  # executions of workflows that were never retained
UNDATED_SHARE = 0.001
SOURCE_MISSING_SHARE = 0.004
HISTORY_FAILED_SHARE = 0.2
HISTORY_AI_SHARE = 0.02
UNPRICED_DAYS, NULL_COST_DAYS, MISSING_MAPPING_DAYS = 90, 75, 30
_NO_COVERAGE = (None,) * 6
# Durations are lognormal around the template's median: one draw into a quantile table
# instead of rng.lognormvariate (two transcendental calls a row).
_QUANTILES = 1024
_Z = tuple(NormalDist().inv_cdf((k + 0.5) / _QUANTILES) for k in range(_QUANTILES))
_DURATION_SPREAD = tuple(math.exp(0.6 * z) for z in _Z)
GAPS = ((0.31, 2.5), (0.62, 0.75), (0.9, 0.2))  # (where on the timeline, days): outages
_TEMPLATE_KEYS = tuple(TEMPLATES)
_encode = msgspec.json.Encoder().encode
_decode_history = msgspec.json.Decoder(HistoryIn).decode


@dataclass(frozen=True)
class BulkPlan:
    workspaces: int
    instances: int
    workflows: int
    executions: int
    seed: int
    now: datetime
    days: int = 400  # the oldest execution is about this old
    chunk: int = CHUNK  # executions a random stream (and a unit of parallel work)

    def __post_init__(self) -> None:
        if (
            min(self.workspaces, self.instances, self.workflows, self.chunk) < 1
            or self.executions < 0
        ):
            raise ValueError("workspaces, instances and workflows must be at least 1")
        if self.instances < self.workspaces or self.workflows < self.instances:
            raise ValueError("need at least one instance a workspace and one workflow an instance")

    @property
    def account_email(self) -> str:
        return f"bulk-{self.seed}@elova.dev"

    @property
    def account_password(self) -> str:
        return f"bulk-password-{self.seed}"


@dataclass(frozen=True)
class _Flow:
    """What generating one execution needs to know about its workflow (or an orphan)."""

    id: str | None
    instance: int
    name: str
    source_id: str
    template: Template
    nodes: list[Json]
    statuses: tuple[tuple[float, str], ...]  # cumulative thresholds


@dataclass
class World:
    """Everything but the executions, derived from the plan alone (cheap to rebuild)."""

    plan: BulkPlan
    account: Json = field(default_factory=dict)
    workspaces: list[Json] = field(default_factory=list)
    instances: list[Json] = field(default_factory=list)
    sync_jobs: list[Json] = field(default_factory=list)
    workflows: list[Json] = field(default_factory=list)
    flows: list[_Flow] = field(default_factory=list)
    cumulative: list[float] = field(default_factory=list)


def _uuid(plan: BulkPlan, *key: object) -> str:
    return stable_uuid(plan.seed, "bulk", *key)


def build_world(plan: BulkPlan) -> World:
    world = World(plan)
    now = plan.now
    iso = format_instant
    world.account = {
        "id": _uuid(plan, "account"),
        "email": plan.account_email,
        "name": f"Bulk data owner {plan.seed}",
        "password": plan.account_password,
    }
    for w in range(plan.workspaces):
        world.workspaces.append(
            {
                "id": _uuid(plan, "workspace", w),
                "name": f"Scale workspace {w + 1}",
                "timeZone": ZONES[w % len(ZONES)],
                "members": [{"accountId": world.account["id"], "role": "owner"}],
            }
        )
    for i in range(plan.instances):
        broken = i % 7 == 6
        synced = now - timedelta(minutes=3 + i)
        world.instances.append(
            {
                "id": _uuid(plan, "instance", i),
                "workspaceId": world.workspaces[i % plan.workspaces]["id"],
                "name": f"n8n {('production', 'staging', 'eu', 'us', 'ops')[i % 5]} {i + 1}",
                "status": "error" if broken else "connected",
                "autoSyncEnabled": not broken,
                "workflowIntervalMinutes": 15,
                "lastSyncAt": iso(synced),
                "lastWorkflowSyncAt": iso(synced),
                "lastExecutionSyncAt": iso(synced),
                "historyComplete": i % 5 != 4,
                "syncState": {
                    "pending": False,
                    "scope": "all",
                    "status": "failed" if broken else "succeeded",
                    "errorCode": "N8N_AUTH_FAILED" if broken else None,
                    "lastAttemptAt": iso(synced),
                },
            }
        )
        world.sync_jobs += _sync_jobs(plan, i, world.instances[-1]["id"])
    rng = stable_rng(plan.seed, "bulk", "weights")
    ranks = list(range(plan.workflows))
    rng.shuffle(ranks)
    weights = [1.0 / (r + 1) ** 1.1 for r in ranks]
    for k in range(plan.workflows):
        wf, flow = _workflow(plan, world, k)
        world.workflows.append(wf)
        world.flows.append(flow)
    orphan_weight = sum(weights) * ORPHAN_SHARE / (1 - ORPHAN_SHARE) / plan.instances
    for i in range(plan.instances):
        name = ORPHAN_NAMES[i % len(ORPHAN_NAMES)]
        template = TEMPLATES[_TEMPLATE_KEYS[i % len(_TEMPLATE_KEYS)]]
        world.flows.append(
            _Flow(None, i, name, f"gone{i:012d}", template, [], _thresholds(template, 1.0))
        )
        weights.append(orphan_weight)
    total = 0.0
    for weight in weights:
        total += weight
        world.cumulative.append(total)
    return world


def _sync_jobs(plan: BulkPlan, index: int, instance_id: str) -> list[Json]:
    rng = stable_rng(plan.seed, "bulk", "jobs", index)
    jobs = []
    for n in range(120):
        created = plan.now - timedelta(hours=2 * n, minutes=rng.uniform(0, 30))
        failed = rng.random() < 0.06
        jobs.append(
            {
                "id": _uuid(plan, "job", index, n),
                "instanceId": instance_id,
                "scope": ("executions", "workflows", "all")[n % 3],
                "trigger": "scheduled" if n % 11 else "manual",
                "status": "failed" if failed else "succeeded",
                "createdAt": format_instant(created),
                "finishedAt": format_instant(created + timedelta(seconds=rng.uniform(2, 90))),
                "errorCode": "N8N_TIMEOUT" if failed else None,
            }
        )
    return jobs


def _workflow(plan: BulkPlan, world: World, k: int) -> tuple[Json, _Flow]:
    key = _TEMPLATE_KEYS[k % len(_TEMPLATE_KEYS)]
    template = TEMPLATES[key]
    wf_id = _uuid(plan, "workflow", k)
    instance = k % plan.instances
    rng = stable_rng(plan.seed, "bulk", "workflow", k)
    nodes = workflow_nodes(plan.seed, wf_id, key)
    name = template.name if k < len(_TEMPLATE_KEYS) else f"{template.name} ({k // 37 + 1})"
    record: Json = {
        "id": wf_id,
        "instanceId": world.instances[instance]["id"],
        "name": name,
        "sourceId": n8n_workflow_id(plan.seed, "bulk", k),
        "active": k % 4 != 3,
        "tracked": True,
        "present": k % 29 != 3,
        "updatedAt": format_instant(plan.now - timedelta(days=rng.uniform(1, 200))),
        "observedAt": format_instant(plan.now - timedelta(minutes=3)),
        "nodes": nodes,
    }
    if k % 17 == 5:
        record["archived"] = True
    elif k % 23 == 7:
        record["definitionAvailable"] = False
        record["definitionRemovedAt"] = format_instant(plan.now - timedelta(days=20))
        record["nodes"] = []
    elif k % 2:
        record["archived"] = False
        record["definitionAvailable"] = True
    flakiness = rng.choice((0.3, 0.6, 1.0, 1.0, 1.5, 4.0))
    flow = _Flow(
        wf_id,
        instance,
        name,
        record["sourceId"],
        template,
        nodes,
        _thresholds(template, flakiness),
    )
    return record, flow


def _thresholds(template: Template, flakiness: float) -> tuple[tuple[float, str], ...]:
    fail = min(template.failure_rate * flakiness, 0.5)
    shares = (
        ("error", fail * 0.85),
        ("crashed", fail * 0.15),
        ("canceled", 0.012),
        ("waiting", 0.02 if template.waits else 0.0),
        ("unknown", 0.003),
    )
    out, total = [], 0.0
    for status, share in shares:
        if share:
            total += share
            out.append((total, status))
    return tuple(out)


# --- executions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Timeline:
    """Maps a position in [0, 1] to an instant: density grows linearly towards `now`, and
    the collector's outages (GAPS) hold no executions."""

    start: float
    active: float
    gaps: tuple[tuple[float, float], ...]  # (active seconds where it starts, length)

    @classmethod
    def of(cls, plan: BulkPlan) -> _Timeline:
        span = plan.days * 86_400.0
        lengths = [days * 86_400.0 for _, days in GAPS]
        active = span - sum(lengths)
        gaps = tuple((at * active, length) for (at, _), length in zip(GAPS, lengths, strict=True))
        return cls(plan.now.timestamp() - span, active, gaps)

    def at(self, position: float) -> float:
        offset = math.sqrt(position) * self.active
        moved = offset
        for where, length in self.gaps:
            if offset >= where:
                moved += length
        return self.start + moved


def _instant(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)


def chunk_count(plan: BulkPlan) -> int:
    return -(-plan.executions // plan.chunk)


HistorySink = Callable[[Json], Any]


def bounded_history(doc: Json) -> str:
    """What the loader stores for a snapshot's `history`: the bounded report's JSON."""
    return bound_history(_decode_history(_encode(doc))).decode("utf-8")


def execution_rows(
    world: World, chunk: int, history: HistorySink = bounded_history
) -> Iterator[tuple[Any, ...]]:
    """The executions of one chunk as table rows (EXECUTION_COLUMNS order); `history` turns a
    history document into the stored column (the bounded report, or the document itself)."""
    plan = world.plan
    n = plan.executions
    rng = random.Random(f"{plan.seed}:bulk:executions:{chunk}")
    r = rng.random
    timeline = _Timeline.of(plan)
    now_s = plan.now.timestamp()
    now_ms = int(now_s * 1000)
    flows, cumulative, top = world.flows, world.cumulative, world.cumulative[-1]
    instances = [(i["id"], i["workspaceId"]) for i in world.instances]
    for index in range(chunk * plan.chunk, min((chunk + 1) * plan.chunk, n)):
        flow = flows[bisect.bisect_right(cumulative, r() * top)]
        started_ms = int(timeline.at((index + r()) / n) * 1000)
        instance_id, workspace_id = instances[flow.instance]
        yield _execution(plan, rng, flow, index, started_ms, now_ms, instance_id, workspace_id,
                         history)  # fmt: skip


def _status(draw: float, flow: _Flow) -> str:
    for threshold, status in flow.statuses:
        if draw < threshold:
            return status
    return "success"


def _execution(
    plan: BulkPlan,
    rng: random.Random,
    flow: _Flow,
    index: int,
    started_ms: int,
    now_ms: int,
    instance_id: str,
    workspace_id: str,
    history: HistorySink,
) -> tuple[Any, ...]:
    r = rng.random
    template = flow.template
    status = _status(r(), flow)
    total_ms = int(template.median_ms * _DURATION_SPREAD[int(r() * _QUANTILES)]) + 1
    if status == "error":
        total_ms = total_ms // 3 + 1
    age_ms = now_ms - started_ms
    stopped_ms: int | None = started_ms + total_ms
    if age_ms < 3_600_000 and r() < 0.3:
        status = "running" if r() < 0.7 else "new"
    if stopped_ms > now_ms - 500 and status not in ("new", "waiting"):  # type: ignore[operator]
        status = "running"  # it has not finished when the collector last looked
    if status in ("running", "new", "waiting"):
        stopped_ms = None
    seen_ms = stopped_ms or started_ms
    # Observed after it was last seen changing, and not after `now` (tests/demo/timelines.py).
    observed_ms = max(min(seen_ms + 3000 + int(r() * 300_000), now_ms - 500), seen_ms)
    started: datetime | None = _instant(started_ms)
    created: datetime | None = _instant(started_ms - 2 - int(r() * 40))
    if status == "new":
        started = None
    undated = r() < UNDATED_SHARE and age_ms > 86_400_000
    if undated:
        started = created = None
        stopped_ms = None
        status = "unknown"
    age_days = age_ms / 86_400_000
    wants = HISTORY_FAILED_SHARE if status in ("error", "crashed") else 0.0
    if template.model is not None and status in ("success", "canceled"):
        wants = HISTORY_AI_SHARE
    with_history = bool(wants) and r() < wants and not undated
    cost_state, amount, coverage, calls = COST_ABSENT, None, _NO_COVERAGE, []
    # Model calls matter for a cost (younger rows) or a history; most rows need neither.
    if (template.model is not None and status != "new" and not undated
            and (age_days <= UNPRICED_DAYS or with_history)):  # fmt: skip
        lo, hi = template.calls
        calls_n = (lo if lo == hi else rng.randint(lo, hi)) - (status == "error")
        calls = [_model_call(rng, template.model) for _ in range(calls_n)]
        cost_state, amount, coverage = _cost(calls, age_days)
    report_doc = None
    if with_history:
        observed = _instant(observed_ms)
        report_doc = _history(plan, rng, flow, status, started or observed, total_ms, observed,
                              calls, age_days)  # fmt: skip
    return (
        _rng_uuid(rng),
        workspace_id,
        instance_id,
        flow.id,
        flow.name,
        str(100_000 + index),
        flow.source_id,
        status,
        started,
        created,
        None if stopped_ms is None else _instant(stopped_ms),
        _instant(observed_ms),
        r() < SOURCE_MISSING_SHARE,
        cost_state,
        amount,
        *coverage,
        None if report_doc is None else history(report_doc),
    )


def _model_call(rng: random.Random, model_key: str) -> Call:
    """service.demo.usage.model_call's distribution with cheaper usage ids: millions of
    calls are made here, and its per-character id draws dominated the generator's time."""
    model = MODELS[model_key]
    draw = rng.random()
    if draw < 0.05:
        return unreported_call(model)
    embedding = model_key == "embedding"
    r = rng.random
    tokens_in = int(math.exp((8.0 if embedding else 7.2) + 0.6 * _Z[int(r() * _QUANTILES)])) + 20
    tokens_out = None if embedding else int(math.exp(5.3 + 0.7 * _Z[int(r() * _QUANTILES)])) + 5
    cached = None if embedding or rng.random() < 0.4 else int(tokens_in * rng.uniform(0, 0.6))
    reasoning = int((tokens_out or 0) * rng.uniform(0.3, 0.8)) if model.reasoning else None
    kind = "estimated" if draw < 0.1 else "reported"
    token = f"{rng.getrandbits(96):024x}"
    prefix = "msg_01" if model.provider == "anthropic" else "chatcmpl-"
    row_id = prefix + token if kind == "reported" else None
    return priced_call(model, kind, row_id, tokens_in, tokens_out, cached, reasoning)


def _rng_uuid(rng: random.Random) -> str:
    value = rng.getrandbits(128)
    value = (value & ~(0xF000 << 64)) | (4 << 76)  # version 4
    value = (value & ~(0xC000 << 48)) | (0x8000 << 48)  # RFC variant
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _cost(calls: list[Call], age_days: float) -> tuple[int, Decimal | None, tuple[Any, ...]]:
    """cost_state, amount and the costCoverage columns, as the collector dates them."""
    if age_days > UNPRICED_DAYS:
        return COST_ABSENT, None, _NO_COVERAGE
    if age_days > NULL_COST_DAYS:
        return COST_NULL, None, _NO_COVERAGE
    fields = cost_fields(
        calls,
        pending=age_days * 86_400 < 600,
        with_missing_mapping=age_days <= MISSING_MAPPING_DAYS,
    )
    cc = fields["costCoverage"]
    coverage = (
        cc["state"],
        cc["pricedComponents"],
        cc["unresolvedComponents"],
        cc["excludedComponents"],
        cc["observations"],
        cc.get("missingMappingObservations"),
    )
    cost = fields["cost"]
    if cost is None:
        return COST_NULL, None, coverage
    return COST_PRESENT, Decimal(cost["amount"]), coverage


def _history(
    plan: BulkPlan,
    rng: random.Random,
    flow: _Flow,
    status: str,
    started: datetime,
    total_ms: int,
    observed: datetime,
    calls: list[Call],
    age_days: float,
) -> Json:
    if age_days > 100 and rng.random() < 0.5:
        return unavailable(observed, expired=True)
    if not flow.nodes:
        return unavailable(observed, expired=False)
    outcome = Outcome(status, started, total_ms, observed, age_days > 100, rng.random() < 0.03)
    version = stable_uuid(plan.seed, "bulk", "version", flow.id, int(age_days // 14))
    return report(rng, flow.nodes, calls, outcome, version)


# --- the two forms ------------------------------------------------------------------------

EXECUTION_COLUMNS = (
    "id", "workspace_id", "instance_id", "workflow_id", "workflow_name", "source_id",
    "source_workflow_id", "status", "started_at", "created_at", "stopped_at", "observed_at",
    "source_missing", "cost_state", "cost_amount", "cc_state", "cc_priced", "cc_unresolved",
    "cc_excluded", "cc_observations", "cc_missing_mapping", "history",
)  # fmt: skip

WORKFLOW_COLUMNS = (
    "id", "workspace_id", "instance_id", "name", "source_id", "active", "tracked", "present",
    "archived_known", "archived", "definition_available", "definition_removed_known",
    "definition_removed_at", "updated_at", "observed_at", "node_count", "nodes",
    "nodes_inventory", "nodes_truncated",
)  # fmt: skip

_UNSET = object()


def workflow_row(record: Json, workspace_id: str) -> tuple[Any, ...]:
    """A workflow record as its table row, derived columns computed as the loader does."""
    nodes = clean_nodes(msgspec.convert(record["nodes"], list[NodeIn]), record["id"])
    inventory, truncated = bound_inventory(nodes)
    archived = record.get("archived", _UNSET)
    removed = record.get("definitionRemovedAt", _UNSET)
    return (
        record["id"],
        workspace_id,
        record["instanceId"],
        record["name"],
        record["sourceId"],
        record["active"],
        record["tracked"],
        record["present"],
        archived is not _UNSET,
        None if archived is _UNSET else archived,
        record.get("definitionAvailable"),
        removed is not _UNSET,
        None if removed is _UNSET or removed is None else datetime.fromisoformat(removed),
        datetime.fromisoformat(record["updatedAt"]),
        datetime.fromisoformat(record["observedAt"]),
        len(nodes),
        _encode(nodes).decode("utf-8"),
        inventory,
        truncated,
    )


def execution_record(row: tuple[Any, ...]) -> Json:
    """A row of `execution_rows(..., history=lambda doc: doc)` as a snapshot record."""
    values = dict(zip(EXECUTION_COLUMNS, row, strict=True))
    record: Json = {
        "id": values["id"],
        "instanceId": values["instance_id"],
        "workflowId": values["workflow_id"],
        "workflowName": values["workflow_name"],
        "sourceId": values["source_id"],
        "sourceWorkflowId": values["source_workflow_id"],
        "status": values["status"],
        "startedAt": _iso(values["started_at"]),
        "createdAt": _iso(values["created_at"]),
        "stoppedAt": _iso(values["stopped_at"]),
        "observedAt": _iso(values["observed_at"]),
        "sourceMissing": values["source_missing"],
    }
    if values["cost_state"] == COST_NULL:
        record["cost"] = None
    elif values["cost_state"] == COST_PRESENT:
        record["cost"] = {"amount": format_amount(values["cost_amount"])}
    if values["cc_state"] is not None:
        record["costCoverage"] = {
            "state": values["cc_state"],
            "pricedComponents": values["cc_priced"],
            "unresolvedComponents": values["cc_unresolved"],
            "excludedComponents": values["cc_excluded"],
            "observations": values["cc_observations"],
        }
        if values["cc_missing_mapping"] is not None:
            record["costCoverage"]["missingMappingObservations"] = values["cc_missing_mapping"]
    if values["history"] is not None:
        record["history"] = values["history"]
    return record


def _iso(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def snapshot(world: World) -> Json:
    """The whole plan as one snapshot document (small plans: tests compare the two paths)."""
    executions = [
        execution_record(row)
        for chunk in range(chunk_count(world.plan))
        for row in execution_rows(world, chunk, history=lambda doc: doc)
    ]
    return {
        "accounts": [world.account],
        "workspaces": world.workspaces,
        "instances": world.instances,
        "syncJobs": world.sync_jobs,
        "workflows": world.workflows,
        "executions": executions,
    }
