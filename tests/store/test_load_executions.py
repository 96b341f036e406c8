"""Loading executions against real PostgreSQL: what is stored, the errors naming the record
and field (a bad file changes nothing), upserts, and the per-workflow summaries."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg
import msgspec
import pytest

from service.errors import LoadError
from service.store.load_executions import load_executions, median
from service.store.load_snapshot import load_snapshot
from service.store.rollups import rebuild_rollups
from tests.support.snapshots import ABSENT, Snapshot, execution


@pytest.fixture
async def conn(db_pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with db_pool.acquire() as connection:
        yield connection


def base() -> tuple[Snapshot, dict[str, Any], dict[str, Any], dict[str, Any]]:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    wf = snap.workflow(inst)
    return snap, ws, inst, wf


async def stored(conn: asyncpg.Connection, record: dict[str, Any]) -> asyncpg.Record:
    return await conn.fetchrow("SELECT * FROM executions WHERE id = $1", UUID(record["id"]))


async def summary(conn: asyncpg.Connection, wf: dict[str, Any]) -> asyncpg.Record | None:
    return await conn.fetchrow(
        "SELECT * FROM workflow_execution_summaries WHERE workflow_id = $1", UUID(wf["id"])
    )


async def summary_row(conn: asyncpg.Connection, wf: dict[str, Any]) -> asyncpg.Record:
    """The workflow's summary, which must exist."""
    row = await summary(conn, wf)
    assert row is not None, f"no summary for workflow {wf['id']}"
    return row


async def test_stores_sanitised_fields_cost_states_and_history(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    absent = snap.execution(inst, wf, workflowName="Orders\x07\u0085", sourceId="1\x00")
    null = snap.execution(inst, wf, cost=None)
    priced = snap.execution(
        inst,
        None,
        id="AAAAAAAA-AAAA-4AAA-8AAA-AAAAAAAAAAAA",  # any case in, lowercase stored
        cost={"amount": "1.500"},
        costCoverage={"state": "complete", "pricedComponents": 2, "unresolvedComponents": 0,
                      "excludedComponents": 0, "observations": 2},
        history={"schemaVersion": 1, "availability": "expired", "reason": "retention",
                 "observedAt": None, "order": "unknown", "workflowVersionId": None,
                 "pinnedData": None, "failure": None, "nodes": [], "truncated": False,
                 "pinning": {"status": "unknown", "source": "unknown", "pinnedNodeIds": []}},
        startedAt="2025-01-15T10:00:00+01:00",
    )  # fmt: skip
    report = await load_snapshot(conn, snap.document())
    assert report.executions == 3

    row = await stored(conn, absent)
    assert row["workspace_id"] == UUID(ws["id"])
    assert row["workflow_name"] == "Orders\ufffd\ufffd"
    assert row["source_id"] == "1\ufffd"
    assert (row["cost_state"], row["cost_amount"], row["cc_state"], row["history"]) == (
        0, None, None, None
    )  # fmt: skip
    assert (await stored(conn, null))["cost_state"] == 1

    row = await conn.fetchrow(
        "SELECT * FROM executions WHERE id = 'aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa'"
    )
    assert row["cost_state"] == 2 and row["cost_amount"] == Decimal("1.500")
    assert (row["cc_state"], row["cc_priced"], row["cc_missing_mapping"]) == ("complete", 2, None)
    assert row["started_at"].isoformat() == "2025-01-15T09:00:00+00:00"
    assert row["sort_at"] == row["started_at"] and row["dated"] is True
    assert json.loads(row["history"])["availability"] == "expired"
    assert priced["id"].startswith("AAAA")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"startedAt": "2025-01-15T09:00:00"}, "startedAt", "timezone"),
        ({"observedAt": None}, "observedAt", "expected"),
        ({"status": "failed"}, "status", "invalid enum"),
        ({"workflowName": ""}, "workflowName", "length"),
        ({"cost": {"amount": "01.5"}}, "cost.amount", "match"),
        ({"cost": {"amount": "1.5e3"}}, "cost.amount", "match"),
        ({"cost": {"amount": "1." + "1" * 19}}, "cost.amount", "match"),
        ({"cost": 0.1}, "cost", "expected"),
        ({"sourceMissing": ABSENT}, "sourceMissing", "required"),
        ({"durationMs": 5}, "durationMs", "not a snapshot field"),
        ({"history": {"schemaVersion": 2}}, "history.schemaVersion", "invalid enum"),
    ],
)
async def test_invalid_records_name_record_and_field(
    conn: asyncpg.Connection, overrides: dict[str, Any], field: str, words: str
) -> None:
    snap, ws, inst, wf = base()
    good = snap.execution(inst, wf)
    bad = snap.execution(inst, wf, **overrides)
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.record == f"executions[1] (id {bad['id']})"
    assert caught.value.field == field
    assert words in caught.value.message.lower()
    # nothing of the file was kept
    assert await stored(conn, good) is None
    assert await conn.fetchval("SELECT 1 FROM workspaces WHERE id = $1", UUID(ws["id"])) is None


async def test_references_are_checked(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    other = snap.instance(ws)
    snap.execution(inst, wf)
    bad = snap.execution(other, wf)
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert (caught.value.record, caught.value.field) == (
        f"executions[1] (id {bad['id']})",
        "workflowId",
    )
    assert "another instance" in caught.value.message

    snap, ws, inst, wf = base()
    bad = snap.execution(inst, "33333333-3333-4333-8333-333333333333")
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.field == "workflowId" and "no such workflow" in caught.value.message

    snap, ws, inst, wf = base()
    bad = snap.execution("22222222-2222-4222-8222-999999999999")
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert (caught.value.record, caught.value.field) == (
        f"executions[0] (id {bad['id']})",
        "instanceId",
    )


async def test_duplicate_ids_and_non_rfc_uuids_are_refused(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    first = snap.execution(inst, wf)
    snap.execution(inst, wf, id=first["id"])
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.field == "id" and "duplicate of executions[0]" in caught.value.message

    snap, ws, inst, wf = base()
    snap.execution(inst, wf, id="12345678-1234-0234-8234-123456789abc")  # version 0
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.field == "id"


async def test_upsert_by_id_moves_summaries_between_workflows(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    wf2 = snap.workflow(inst)
    moving = snap.execution(inst, wf, cost={"amount": "2"})
    snap.execution(inst, wf2, cost={"amount": "4"})
    await load_snapshot(conn, snap.document())
    assert (await summary_row(conn, wf))["total_executions"] == 1
    assert (await summary_row(conn, wf2))["median_amount"] == Decimal("4")

    moving["workflowId"] = wf2["id"]
    moving["status"] = "error"
    await load_snapshot(conn, snap.document())  # same file again, one row changed
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM executions WHERE instance_id = $1", UUID(inst["id"])
        )
        == 2
    )
    assert (await stored(conn, moving))["status"] == "error"
    assert await summary(conn, wf) is None  # no executions left: no costMedian
    moved = await summary_row(conn, wf2)
    assert (moved["total_executions"], moved["priced_executions"]) == (2, 2)
    assert moved["median_amount"] == Decimal("3")


@pytest.mark.parametrize(
    ("amounts", "expected", "partial"),
    [
        (["0.1", "0.2"], "0.15", False),
        (["0.1", "0.2", "0.3"], "0.2", False),
        (["5", "1", "3", "2"], "2.5", False),
        (["0.000000000000000001", "0.000000000000000002"], None, False),  # needs 19 digits
        (["0.000000000000000001", "0.000000000000000003"], "0.000000000000000002", False),
        (["9" * 38 + ".999999999999999999", "9" * 38 + ".999999999999999999"],
         "9" * 38 + ".999999999999999999", False),
        ([None, "0.3"], "0.3", True),  # unpriced (cost null) makes it partial
        ([ABSENT], None, True),
    ],
)  # fmt: skip
async def test_exact_median_and_partial_flag(
    conn: asyncpg.Connection, amounts: list[Any], expected: str | None, partial: bool
) -> None:
    snap, ws, inst, wf = base()
    complete = {"state": "complete", "pricedComponents": 1, "unresolvedComponents": 0,
                "excludedComponents": 0, "observations": 1}  # fmt: skip
    for amount in amounts:
        cost = ABSENT if amount is ABSENT else (None if amount is None else {"amount": amount})
        snap.execution(inst, wf, cost=cost, costCoverage=complete)
    await load_snapshot(conn, snap.document())
    row = await summary_row(conn, wf)
    assert row["total_executions"] == len(amounts)
    assert row["median_amount"] == (None if expected is None else Decimal(expected))
    assert row["cost_partial"] is partial
    assert row["missing_mapping_observations"] is None


async def test_partial_when_a_priced_coverage_is_not_complete_and_missing_mapping_sum(
    conn: asyncpg.Connection,
) -> None:
    snap, ws, inst, wf = base()
    cov = {"state": "complete", "pricedComponents": 1, "unresolvedComponents": 0,
           "excludedComponents": 0, "observations": 1}  # fmt: skip
    snap.execution(
        inst, wf, cost={"amount": "1"}, costCoverage={**cov, "missingMappingObservations": 2}
    )
    partial = {**cov, "state": "partial", "missingMappingObservations": 3}
    snap.execution(inst, wf, cost={"amount": "1"}, costCoverage=partial)
    snap.execution(inst, wf, cost={"amount": "1"})  # no coverage: not known complete
    await load_snapshot(conn, snap.document())
    row = await summary_row(conn, wf)
    assert (row["cost_partial"], row["missing_mapping_observations"]) == (True, 5)


def test_median_function_edges() -> None:
    assert median([]) is None
    assert median([Decimal("7")]) == Decimal("7")
    assert median([Decimal("1"), Decimal("2")]) == Decimal("1.5")


async def test_load_executions_accepts_mappings_and_raw(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    await load_snapshot(conn, snap.document())
    first, second = execution(inst, wf), execution(inst, wf)
    async with conn.transaction():
        count = await load_executions(conn, [first])
        count += await load_executions(conn, [msgspec.Raw(msgspec.json.encode(second))])
    assert count == 2
    assert (await summary_row(conn, wf))["total_executions"] == 2


async def test_large_snapshot_loads_quickly(conn: asyncpg.Connection) -> None:
    snap, ws, inst, wf = base()
    await load_snapshot(conn, snap.document())
    items = [
        execution(inst, wf, cost={"amount": f"0.{i:06d}"}, startedAt=None if i % 7 == 0 else
                  f"2025-01-{1 + i % 28:02d}T{i % 24:02d}:00:00Z")
        for i in range(20_000)
    ]  # fmt: skip
    raws = [msgspec.Raw(msgspec.json.encode(item)) for item in items]
    began = time.perf_counter()
    async with conn.transaction():
        assert await load_executions(conn, raws) == 20_000
    elapsed = time.perf_counter() - began
    assert elapsed < 20, elapsed  # measured ≈1 s on the 2-core CI machine
    assert (await summary_row(conn, wf))["total_executions"] == 20_000


async def test_reload_keeps_statistics_rollups_equal_to_a_rebuild(conn: asyncpg.Connection) -> None:
    """The upsert moves rollups by the difference: a second load that changes status, time,
    cost and instance of some rows (and adds others) leaves both rollup tables equal to a
    rebuild from the rows, with no emptied slot left behind."""
    snap, ws, inst, wf = base()
    other = snap.instance(ws)
    rows = [
        snap.execution(inst, wf, status="error" if i % 3 else "success",
                       startedAt=f"2025-01-{1 + i % 9:02d}T{i % 24:02d}:{i % 4 * 15:02d}:00Z",
                       cost={"amount": f"0.{i:03d}"} if i % 2 else ABSENT)
        for i in range(60)
    ]  # fmt: skip
    await load_snapshot(conn, snap.document())
    for i, row in enumerate(rows[:30]):
        started = None if i % 5 == 0 else f"2024-12-{1 + i % 20:02d}T03:07:00Z"
        row.update(status="crashed", cost=None, startedAt=started, createdAt=None,
                   instanceId=other["id"], workflowId=None)  # fmt: skip
    snap.execution(other, startedAt="2025-01-20T00:00:00Z")
    await load_snapshot(conn, snap.document())

    async def tables() -> list[list[tuple[Any, ...]]]:
        return [
            [tuple(r) for r in await conn.fetch(
                f"SELECT * FROM {t} WHERE workspace_id = $1 ORDER BY slot, instance_id",
                UUID(ws["id"]))]
            for t in ("execution_rollups", "execution_rollups_daily")
        ]  # fmt: skip

    maintained = await tables()
    assert all(row[3] > 0 for table in maintained for row in table)  # executions > 0
    assert sum(row[3] for row in maintained[1]) == 61
    async with conn.transaction():
        await rebuild_rollups(conn, [UUID(ws["id"])])
        assert await tables() == maintained
