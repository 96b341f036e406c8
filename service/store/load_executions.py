"""Loading the `executions` array of a snapshot, and the per-workflow execution summaries.

`load_executions` validates every record (msgspec), sanitises its strings, bounds its
history report (service/rules/history.py), checks its references (the instance exists; the
workflow is null or one of the same instance) and upserts all of them by id in one
statement fed by COPY, which also moves the statistics rollups by the difference
(service/store/rollups.py). It must run inside the snapshot's transaction, after workflows.
`refresh_workflow_summaries` recomputes the costMedian inputs of the workflows concerned.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal, localcontext
from typing import Annotated, Any, Literal
from uuid import UUID

import asyncpg
import msgspec

from service.errors import LoadError
from service.rules.fields import Counter, Instant, NonEmpty
from service.rules.history import HistoryIn, bound_history
from service.rules.shaping import MAX_FRACTION_DIGITS, sanitize_name
from service.store.decoding import check_id, decode_records, label, unique_ids
from service.store.rollups import upsert_with_rollups

ARRAY = "executions"

Amount = Annotated[str, msgspec.Meta(pattern=r"^(?:0|[1-9]\d{0,37})(?:\.\d{1,18})?\Z")]
Status = Literal["success", "error", "crashed", "canceled", "new", "running", "waiting", "unknown"]
COST_ABSENT, COST_NULL, COST_PRESENT = 0, 1, 2


class CostIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    amount: Amount
    # Accepted so a tool's output can be pasted into a snapshot; nothing else is allowed.
    currency: Literal["USD"] = "USD"
    kind: Literal["estimated"] = "estimated"
    basis: Literal["openrouter"] = "openrouter"


class CostCoverageIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    state: Literal["pending", "complete", "partial", "unavailable", "not_applicable"]
    pricedComponents: Counter
    unresolvedComponents: Counter
    excludedComponents: Counter
    observations: Counter
    missingMappingObservations: Counter | msgspec.UnsetType = msgspec.UNSET


class ExecutionIn(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    id: UUID
    instanceId: UUID
    workflowId: UUID | None
    workflowName: NonEmpty
    sourceId: NonEmpty
    sourceWorkflowId: NonEmpty
    status: Status
    startedAt: Instant | None
    createdAt: Instant | None
    stoppedAt: Instant | None
    observedAt: Instant
    sourceMissing: bool
    cost: CostIn | None | msgspec.UnsetType = msgspec.UNSET
    costCoverage: CostCoverageIn | None | msgspec.UnsetType = msgspec.UNSET
    history: HistoryIn | None | msgspec.UnsetType = msgspec.UNSET


_COLUMNS = (
    "ord", "id", "instance_id", "workflow_id", "workflow_name", "source_id",
    "source_workflow_id", "status", "started_at", "created_at", "stopped_at", "observed_at",
    "source_missing", "cost_state", "cost_amount", "cc_state", "cc_priced", "cc_unresolved",
    "cc_excluded", "cc_observations", "cc_missing_mapping", "history",
)  # fmt: skip

_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS load_executions_stage (
    ord integer, id uuid, instance_id uuid, workflow_id uuid, workflow_name text,
    source_id text, source_workflow_id text, status text, started_at timestamptz,
    created_at timestamptz, stopped_at timestamptz, observed_at timestamptz,
    source_missing boolean, cost_state smallint, cost_amount numeric, cc_state text,
    cc_priced bigint, cc_unresolved bigint, cc_excluded bigint, cc_observations bigint,
    cc_missing_mapping bigint, history text
) ON COMMIT DROP;
TRUNCATE load_executions_stage;
"""

_MISSING_INSTANCE = """
SELECT s.ord, s.id FROM load_executions_stage s
  LEFT JOIN instances i ON i.id = s.instance_id
 WHERE i.id IS NULL ORDER BY s.ord LIMIT 1
"""

_FOREIGN_WORKFLOW = """
SELECT s.ord, s.id, w.instance_id IS NOT NULL AS exists_elsewhere FROM load_executions_stage s
  LEFT JOIN workflows w ON w.id = s.workflow_id
 WHERE s.workflow_id IS NOT NULL AND w.instance_id IS DISTINCT FROM s.instance_id
 ORDER BY s.ord LIMIT 1
"""

_PREVIOUS_WORKFLOWS = """
SELECT DISTINCT e.workflow_id FROM executions e JOIN load_executions_stage s ON s.id = e.id
 WHERE e.workflow_id IS NOT NULL
"""

_UPSERT = """
INSERT INTO executions (id, workspace_id, instance_id, workflow_id, workflow_name, source_id,
    source_workflow_id, status, started_at, created_at, stopped_at, observed_at, source_missing,
    cost_state, cost_amount, cc_state, cc_priced, cc_unresolved, cc_excluded, cc_observations,
    cc_missing_mapping, history)
SELECT s.id, i.workspace_id, s.instance_id, s.workflow_id, s.workflow_name, s.source_id,
       s.source_workflow_id, s.status, s.started_at, s.created_at, s.stopped_at, s.observed_at,
       s.source_missing, s.cost_state, s.cost_amount, s.cc_state, s.cc_priced, s.cc_unresolved,
       s.cc_excluded, s.cc_observations, s.cc_missing_mapping, s.history
  FROM load_executions_stage s JOIN instances i ON i.id = s.instance_id
ON CONFLICT (id) DO UPDATE SET
    workspace_id = EXCLUDED.workspace_id, instance_id = EXCLUDED.instance_id,
    workflow_id = EXCLUDED.workflow_id, workflow_name = EXCLUDED.workflow_name,
    source_id = EXCLUDED.source_id, source_workflow_id = EXCLUDED.source_workflow_id,
    status = EXCLUDED.status, started_at = EXCLUDED.started_at,
    created_at = EXCLUDED.created_at, stopped_at = EXCLUDED.stopped_at,
    observed_at = EXCLUDED.observed_at, source_missing = EXCLUDED.source_missing,
    cost_state = EXCLUDED.cost_state, cost_amount = EXCLUDED.cost_amount,
    cc_state = EXCLUDED.cc_state, cc_priced = EXCLUDED.cc_priced,
    cc_unresolved = EXCLUDED.cc_unresolved, cc_excluded = EXCLUDED.cc_excluded,
    cc_observations = EXCLUDED.cc_observations, cc_missing_mapping = EXCLUDED.cc_missing_mapping,
    history = EXCLUDED.history
"""

_NEW_WORKFLOWS = (
    "SELECT DISTINCT workflow_id FROM load_executions_stage WHERE workflow_id IS NOT NULL"
)


async def load_executions(
    conn: asyncpg.Connection,
    items: Sequence[msgspec.Raw] | Sequence[Mapping[str, Any]],
    *,
    refresh_summaries: bool = True,
) -> int:
    """Validate and upsert the snapshot's executions; return how many were loaded.

    `items` are the array's elements, raw JSON (as the snapshot decoder keeps them) or
    already-decoded mappings. Raises LoadError naming `executions[i] (id …)` and the field;
    the caller's transaction then rolls everything back.
    """
    raws = [item if isinstance(item, msgspec.Raw) else msgspec.Raw(msgspec.json.encode(item))
            for item in items]  # fmt: skip
    records = _decode(raws)
    unique_ids([r.id for r in records], ARRAY)
    rows = [_row(index, record) for index, record in enumerate(records)]
    async with conn.transaction():  # a savepoint inside the snapshot's transaction
        await conn.execute(_STAGE)
        await conn.copy_records_to_table("load_executions_stage", records=rows, columns=_COLUMNS)
        await _check_references(conn)
        previous = {r[0] for r in await conn.fetch(_PREVIOUS_WORKFLOWS)}
        # The same statement moves the statistics rollups by the difference (0005).
        await upsert_with_rollups(conn, _UPSERT, "load_executions_stage")
        if refresh_summaries:
            current = {r[0] for r in await conn.fetch(_NEW_WORKFLOWS)}
            await refresh_workflow_summaries(conn, previous | current)
        await conn.execute("TRUNCATE load_executions_stage")
    return len(rows)


_decode_all = msgspec.json.Decoder(list[ExecutionIn]).decode


def _decode(raws: list[msgspec.Raw]) -> list[ExecutionIn]:
    """All records in one pass; only a file with an error is decoded again record by record,
    for a LoadError naming the record and the field."""
    try:
        return _decode_all(b"[" + b",".join(bytes(raw) for raw in raws) + b"]")
    except msgspec.ValidationError:
        return decode_records(raws, ExecutionIn, ARRAY)


def _row(index: int, record: ExecutionIn) -> tuple[Any, ...]:
    where = label(ARRAY, index, str(record.id))
    check_id(record.id, where, "id")
    check_id(record.instanceId, where, "instanceId")
    if record.workflowId is not None:
        check_id(record.workflowId, where, "workflowId")
    cost_state, amount = _cost(record.cost)
    coverage = record.costCoverage
    cc: tuple[Any, ...] = (None,) * 6
    if isinstance(coverage, CostCoverageIn):
        missing = coverage.missingMappingObservations
        cc = (
            coverage.state,
            coverage.pricedComponents,
            coverage.unresolvedComponents,
            coverage.excludedComponents,
            coverage.observations,
            None if missing is msgspec.UNSET else missing,
        )
    history = record.history
    report = bound_history(history).decode("utf-8") if isinstance(history, HistoryIn) else None
    return (
        index,
        record.id,
        record.instanceId,
        record.workflowId,
        sanitize_name(record.workflowName),
        sanitize_name(record.sourceId),
        sanitize_name(record.sourceWorkflowId),
        record.status,
        record.startedAt,
        record.createdAt,
        record.stoppedAt,
        record.observedAt,
        record.sourceMissing,
        cost_state,
        amount,
        *cc,
        report,
    )


def _cost(cost: CostIn | None | msgspec.UnsetType) -> tuple[int, Decimal | None]:
    if cost is msgspec.UNSET:
        return COST_ABSENT, None
    if cost is None:
        return COST_NULL, None
    return COST_PRESENT, Decimal(cost.amount)


async def _check_references(conn: asyncpg.Connection) -> None:
    row = await conn.fetchrow(_MISSING_INSTANCE)
    if row is not None:
        raise LoadError(
            label(ARRAY, row["ord"], str(row["id"])),
            "instanceId",
            "no such instance in the snapshot",
        )
    row = await conn.fetchrow(_FOREIGN_WORKFLOW)
    if row is not None:
        message = (
            "the workflow belongs to another instance"
            if row["exists_elsewhere"]
            else "no such workflow in the snapshot (use null for a workflow not retained)"
        )
        raise LoadError(label(ARRAY, row["ord"], str(row["id"])), "workflowId", message)


# The median is exact: the middle amount, or the mean of the middle two computed in Python's
# Decimal (the database's numeric division would round to its own scale).
_SUMMARIES = """
WITH touched AS (
    SELECT w.id FROM workflows w WHERE w.id = ANY($1::uuid[])
), agg AS (
    SELECT e.workflow_id,
           count(*) AS total,
           count(*) FILTER (WHERE e.cost_state = 2) AS priced,
           bool_or(e.cost_state <> 2 OR e.cc_state IS DISTINCT FROM 'complete') AS partial,
           sum(e.cc_missing_mapping) AS missing_mapping
      FROM executions e JOIN touched t ON t.id = e.workflow_id
     GROUP BY e.workflow_id
), ranked AS (
    SELECT e.workflow_id, e.cost_amount,
           row_number() OVER (PARTITION BY e.workflow_id ORDER BY e.cost_amount) AS rn
      FROM executions e JOIN touched t ON t.id = e.workflow_id
     WHERE e.cost_state = 2
)
SELECT a.workflow_id, a.total, a.priced, a.partial, a.missing_mapping,
       (SELECT array_agg(r.cost_amount ORDER BY r.rn) FROM ranked r
         WHERE r.workflow_id = a.workflow_id
           AND r.rn IN ((a.priced + 1) / 2, (a.priced + 2) / 2)) AS middle
  FROM agg a
"""

_UPSERT_SUMMARY = """
INSERT INTO workflow_execution_summaries (workflow_id, total_executions, priced_executions,
    median_amount, cost_partial, missing_mapping_observations)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (workflow_id) DO UPDATE SET
    total_executions = EXCLUDED.total_executions, priced_executions = EXCLUDED.priced_executions,
    median_amount = EXCLUDED.median_amount, cost_partial = EXCLUDED.cost_partial,
    missing_mapping_observations = EXCLUDED.missing_mapping_observations
"""

_DROP_EMPTY = """
DELETE FROM workflow_execution_summaries s
 WHERE s.workflow_id = ANY($1::uuid[])
   AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.workflow_id = s.workflow_id)
"""


async def refresh_workflow_summaries(
    conn: asyncpg.Connection, workflow_ids: Iterable[UUID]
) -> None:
    """Recompute workflow_execution_summaries for these workflows (unknown ids are ignored;
    a workflow left without executions loses its row: costMedian is then absent)."""
    ids = sorted(set(workflow_ids))
    if not ids:
        return
    rows = await conn.fetch(_SUMMARIES, ids)
    await conn.executemany(
        _UPSERT_SUMMARY,
        [
            (
                r["workflow_id"],
                r["total"],
                r["priced"],
                median(r["middle"] or []),
                r["partial"],
                r["missing_mapping"],
            )
            for r in rows
        ],
    )
    await conn.execute(_DROP_EMPTY, ids)


def median(middle: Sequence[Decimal]) -> Decimal | None:
    """The middle amount, or the exact mean of the middle two; None when nothing is priced or
    the mean needs more than 18 fractional digits."""
    if not middle:
        return None
    if len(middle) == 1:
        return middle[0]
    with localcontext() as exact:
        exact.prec = 200  # far beyond 38 + 19 digits: addition and halving stay exact
        mean = (middle[0] + middle[1]) / 2
        exponent = mean.normalize().as_tuple().exponent
    assert isinstance(exponent, int)
    if -exponent > MAX_FRACTION_DIGITS:
        return None
    return mean
