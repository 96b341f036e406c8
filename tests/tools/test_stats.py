"""get_execution_stats against real PostgreSQL, every output validated against its schema:
windows and daily buckets across DST, odd offsets, undated and future rows, `all` units,
exact cost sums and cost coverage."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from service.errors import NotFound, ValidationError
from tests.support.snapshots import ABSENT, Snapshot
from tests.tools.execution_support import load, workspace_client

COMPLETE = {"state": "complete", "pricedComponents": 1, "unresolvedComponents": 0,
            "excludedComponents": 0, "observations": 1}  # fmt: skip


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


async def stats(
    pool: asyncpg.Pool, ws: dict[str, Any], now: str, period: str, zone: str
) -> dict[str, Any]:
    client = workspace_client(pool, ws, utc(now))
    out = await client.call(
        "get_execution_stats", workspaceId=ws["id"], period=period, timeZone=zone
    )
    totals = out["totals"]
    assert totals["executions"] == totals["success"] + totals["failed"] + totals["other"]
    return out


def counts(out: dict[str, Any]) -> list[tuple[str, int, int, int]]:
    return [(b["at"], b["success"], b["failed"], b["other"]) for b in out["buckets"]]


async def test_seven_days_across_berlin_spring_change(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="Europe/Berlin", executionPollIntervalSeconds=120)
    inst = snap.instance(ws)
    # 00:30 local on the change day (still +01:00) belongs to March 31
    snap.execution(inst, startedAt="2024-03-30T23:30:00Z", status="error")
    snap.execution(inst, startedAt="2024-03-30T22:59:59Z", status="crashed")  # 23:59:59 on 30th
    snap.execution(inst, startedAt="2024-03-31T22:00:00Z", status="waiting")  # 00:00 April 1
    snap.execution(inst, startedAt="2024-03-26T22:59:59Z")  # before the window
    snap.execution(inst, startedAt=None, createdAt=None)  # undated
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2024-04-02T10:00:00Z", "7d", "Europe/Berlin")
    assert out["asOf"] == "2024-04-02T12:00:00+02:00"
    assert counts(out) == [
        ("2024-03-27T00:00:00+01:00", 0, 0, 0),
        ("2024-03-28T00:00:00+01:00", 0, 0, 0),
        ("2024-03-29T00:00:00+01:00", 0, 0, 0),
        ("2024-03-30T00:00:00+01:00", 0, 1, 0),
        ("2024-03-31T00:00:00+01:00", 0, 1, 0),
        ("2024-04-01T00:00:00+02:00", 0, 0, 1),
        ("2024-04-02T00:00:00+02:00", 0, 0, 0),
    ]
    assert out["totals"] == {"executions": 3, "success": 0, "failed": 2, "other": 1,
                             "excludedExecutions": 2, "undatedExecutions": 1}  # fmt: skip
    assert out["sync"] == {"executionPollIntervalSeconds": 120}
    assert out["usage"] is None
    assert out["cost"] is None
    assert out["costCoverage"]["state"] == "unavailable"


async def test_thirty_days_in_santiago_where_dst_skips_midnight(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="America/Santiago")
    inst = snap.instance(ws)
    snap.execution(inst, startedAt="2024-09-08T04:00:00Z")  # 01:00 -03, first instant of 8th
    snap.execution(inst, startedAt="2024-09-08T03:59:59Z")  # 23:59:59 -04 on the 7th
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2024-09-20T12:00:00Z", "30d", "America/Santiago")
    buckets = {b[0]: b[1] for b in counts(out)}
    assert len(buckets) == 30
    assert buckets["2024-09-08T01:00:00-03:00"] == 1
    assert buckets["2024-09-07T00:00:00-04:00"] == 1
    assert counts(out)[0][0] == "2024-08-22T00:00:00-04:00"


async def test_today_in_kathmandu_and_east_of_utc_near_midnight(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Kathmandu")
    inst = snap.instance(ws)
    snap.execution(inst, startedAt="2025-01-14T18:15:00Z")  # 00:00 +05:45 on the 15th
    snap.execution(inst, startedAt="2025-01-14T18:14:59Z")  # the 14th
    snap.execution(inst, startedAt="2025-01-15T10:00:00Z")  # 00:00 +14:00 on the 16th
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2025-01-15T10:30:00Z", "today", "Asia/Kathmandu")
    assert out["asOf"] == "2025-01-15T16:15:00+05:45"
    assert counts(out) == [("2025-01-15T00:00:00+05:45", 2, 0, 0)]
    assert out["totals"]["excludedExecutions"] == 1
    # Kiritimati (+14): 10:30Z is 00:30 on the 16th; today holds one execution
    out = await stats(db_pool, ws, "2025-01-15T10:30:00Z", "today", "Pacific/Kiritimati")
    assert out["asOf"] == "2025-01-16T00:30:00+14:00"
    assert counts(out) == [("2025-01-16T00:00:00+14:00", 1, 0, 0)]


async def test_all_counts_undated_and_future_rows_but_buckets_stop_at_as_of(
    db_pool: asyncpg.Pool,
) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    snap.execution(inst, startedAt="2024-11-20T12:00:00Z", status="error")
    snap.execution(inst, startedAt=None, createdAt="2025-01-14T12:00:00Z")
    snap.execution(inst, startedAt=None, createdAt=None, status="unknown")
    snap.execution(inst, startedAt="2025-02-01T00:00:00Z")  # after asOf
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2025-01-15T09:00:00Z", "all", "UTC")
    assert out["totals"] == {"executions": 4, "success": 2, "failed": 1, "other": 1,
                             "excludedExecutions": 0, "undatedExecutions": 1}  # fmt: skip
    # 57 dates: ISO weeks from Monday 2024-11-18 through the week of asOf
    at = [b[0] for b in counts(out)]
    assert at[0] == "2024-11-18T00:00:00+00:00" and at[-1] == "2025-01-13T00:00:00+00:00"
    assert len(at) == 9
    assert sum(b[1] + b[2] + b[3] for b in counts(out)) == 2  # undated and future in none
    # the 7d window excludes all but one
    week = await stats(db_pool, ws, "2025-01-15T09:00:00Z", "7d", "UTC")
    assert week["totals"]["executions"] == 1
    assert week["totals"]["excludedExecutions"] == 3
    assert week["totals"]["undatedExecutions"] == 1


async def test_all_with_only_future_or_no_rows(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    snap.execution(inst, startedAt="2026-01-01T00:00:00Z", cost={"amount": "1"})
    empty = snap.workspace()
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2025-01-15T09:00:00Z", "all", "UTC")
    assert out["buckets"] == []
    assert out["totals"]["executions"] == 1
    assert out["cost"]["amount"] == "1"
    out = await stats(db_pool, empty, "2025-01-15T09:00:00Z", "all", "UTC")
    assert out["buckets"] == [] and out["totals"]["executions"] == 0
    assert out["cost"] is None
    assert out["costCoverage"] == {"state": "not_applicable", "pricedComponents": 0,
                                   "unresolvedComponents": 0, "excludedComponents": 0,
                                   "observations": 0}  # fmt: skip
    assert out["coverage"]["firstObservedAt"] is None


@pytest.mark.parametrize(
    ("costs", "amount", "state", "missing"),
    [
        ([("0.1", COMPLETE), ("0.2", COMPLETE)], "0.3", "complete", ABSENT),
        ([("1.500", COMPLETE), ("0.000", COMPLETE)], "1.5", "complete", ABSENT),
        ([("0", COMPLETE)], "0", "complete", ABSENT),
        ([("0.1", COMPLETE), (None, COMPLETE)], "0.1", "partial", ABSENT),
        ([("0.1", COMPLETE), (ABSENT, ABSENT)], "0.1", "partial", ABSENT),
        ([("0.1", ABSENT)], "0.1", "partial", ABSENT),
        ([("0.1", {**COMPLETE, "state": "partial", "missingMappingObservations": 4}),
          ("0.2", {**COMPLETE, "missingMappingObservations": 1})], "0.3", "partial", 5),
        ([(None, ABSENT), (ABSENT, ABSENT)], None, "unavailable", ABSENT),
        ([("9" * 38, COMPLETE), ("9" * 38, COMPLETE)], None, "partial", ABSENT),  # 39 digits
        ([("9" * 37 + ".999999999999999999", COMPLETE), ("0.000000000000000001", COMPLETE)],
         "1" + "0" * 37, "complete", ABSENT),
    ],
)  # fmt: skip
async def test_exact_cost_sum_and_coverage(
    db_pool: asyncpg.Pool,
    costs: list[tuple[Any, Any]],
    amount: str | None,
    state: str,
    missing: Any,
) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    for cost, coverage in costs:
        value = cost if cost in (None, ABSENT) else {"amount": cost}
        snap.execution(inst, startedAt="2025-01-15T08:00:00Z", cost=value, costCoverage=coverage)
    snap.execution(inst, startedAt="2024-01-01T00:00:00Z", cost={"amount": "100"})  # outside
    await load(db_pool, snap)
    out = await stats(db_pool, ws, "2025-01-15T09:00:00Z", "today", "UTC")
    assert (out["cost"] or {}).get("amount") == amount
    if amount is not None:
        assert out["cost"] == {"amount": amount, "currency": "USD", "kind": "estimated",
                               "basis": "openrouter"}  # fmt: skip
    coverage = out["costCoverage"]
    assert coverage["state"] == state
    priced_with_coverage = sum(1 for c, cov in costs if cov is not ABSENT)
    assert coverage["pricedComponents"] == priced_with_coverage
    assert coverage.get("missingMappingObservations", ABSENT) == missing


async def test_errors_zone_workspace_arguments(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    other = snap.workspace()
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, utc("2025-01-15T09:00:00Z"))

    async def call(**arguments: Any) -> dict[str, Any]:
        return await client.call("get_execution_stats", **arguments)

    with pytest.raises(ValidationError):
        await call(workspaceId=ws["id"], period="7d", timeZone="Europe/Atlantis")
    with pytest.raises(ValidationError):
        await call(workspaceId=ws["id"], period="7d", timeZone="europe/berlin")
    with pytest.raises(ValidationError):  # zone before NOT_FOUND
        await call(workspaceId=other["id"], period="7d", timeZone="Nowhere/Zone")
    with pytest.raises(NotFound):
        await call(workspaceId=other["id"], period="7d", timeZone="UTC")
    for bad in ({"period": "week", "timeZone": "UTC"}, {"period": "7d"},
                {"period": "7d", "timeZone": "UTC", "limit": 5}):  # fmt: skip
        with pytest.raises(ValidationError):
            await call(workspaceId=ws["id"], **bad)
