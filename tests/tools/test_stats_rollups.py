"""Statistics from the rollups equal the raw aggregation, exactly: a property test over random
small workspaces (times on and next to slot and day edges, undated and future rows, costs,
reloads that change status, time, cost and instance) in zones with 45-minute offsets, DST
and half-hour DST; plus the maintained rollup tables equal a rebuild from scratch."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.store.reads.stats import DAY_US, SLOT_US, raw_counts, rollup_counts, split_range
from service.store.rollups import rebuild_rollups
from tests.support.snapshots import ABSENT, Snapshot
from tests.tools.execution_support import load, workspace_client

ZONES = ("Asia/Kathmandu", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham", "UTC")
PERIODS = ("today", "7d", "30d", "all")
# asOf candidates: next to Berlin's and Lord Howe's DST changes, and an ordinary day.
AS_OF = st.sampled_from(
    [
        datetime(2024, 3, 31, 1, 0, tzinfo=UTC),
        datetime(2024, 4, 6, 15, 45, 0, 1, tzinfo=UTC),
        datetime(2024, 10, 27, 18, 14, 59, 999999, tzinfo=UTC),
        datetime(2025, 1, 15, 18, 15, tzinfo=UTC),
    ]
)
STATUSES = st.sampled_from(["success", "error", "crashed", "waiting", "canceled", "unknown"])
COVERAGE = st.one_of(
    st.just(ABSENT),
    st.builds(
        lambda state, n, missing: {
            "state": state,
            "pricedComponents": n,
            "unresolvedComponents": n // 2,
            "excludedComponents": 1,
            "observations": n + 1,
            **({} if missing is None else {"missingMappingObservations": missing}),
        },
        st.sampled_from(["complete", "partial", "pending"]),
        st.integers(0, 2**40),
        st.one_of(st.none(), st.integers(0, 9)),
    ),
)
COST = st.one_of(
    st.just(ABSENT),
    st.none(),
    st.sampled_from(["0", "0.1", "1.500", "0.000000000000000001", "9" * 38, "123.456"]).map(
        lambda amount: {"amount": amount}
    ),
)


@st.composite
def offsets(draw: st.DrawFn) -> timedelta | None:
    """Where a row lies relative to asOf: None undated; mostly within 31 days before, on a
    15-minute edge or 1 µs beside it; some after asOf, some years before."""
    kind = draw(st.sampled_from(["near", "near", "near", "undated", "future", "old"]))
    if kind == "undated":
        return None
    if kind == "old":
        return timedelta(days=draw(st.integers(400, 3000)), minutes=draw(st.integers(0, 1439)))
    minutes = draw(st.integers(0, 31 * 24 * 4)) * 15 + draw(st.sampled_from([0, 0, 5, 15, 45]))
    jitter = timedelta(microseconds=draw(st.sampled_from([0, 0, 1, -1])))
    delta = timedelta(minutes=minutes) + jitter
    return -delta if kind == "future" else delta


ROW = st.tuples(offsets(), STATUSES, COST, COVERAGE, st.booleans(), st.booleans())


def _stamp(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def fill(
    snap: Snapshot, instances: list[dict[str, Any]], as_of: datetime, rows: list[Any]
) -> list[dict[str, Any]]:
    out = []
    for offset, status, cost, coverage, created_only, second in rows:
        at = None if offset is None else _stamp(as_of - offset)
        out.append(
            snap.execution(
                instances[1 if second else 0],
                status=status,
                startedAt=None if created_only else at,
                createdAt=at,
                cost=cost,
                costCoverage=coverage,
            )
        )
    return out


async def compare(conn: asyncpg.Connection, workspace_id: UUID, as_of: datetime) -> None:
    for zone_name in ZONES:
        zone = ZoneInfo(zone_name)
        for period in PERIODS:
            async with conn.transaction(isolation="repeatable_read"):
                raw = await raw_counts(conn, workspace_id, period, as_of, zone)
                rolled = await rollup_counts(conn, workspace_id, period, as_of, zone)
            assert rolled == raw, (zone_name, period)


async def rollup_rows(conn: asyncpg.Connection, workspace_id: UUID) -> list[Any]:
    rows = []
    for table in ("execution_rollups", "execution_rollups_daily"):
        found = await conn.fetch(
            f"SELECT * FROM {table} WHERE workspace_id = $1 ORDER BY slot, instance_id",
            workspace_id,
        )
        rows.append([tuple(r.values()) for r in found])
    return rows


async def assert_equals_rebuild(conn: asyncpg.Connection, workspace_id: UUID) -> None:
    maintained = await rollup_rows(conn, workspace_id)
    tx = conn.transaction()
    await tx.start()
    try:
        await rebuild_rollups(conn, [workspace_id])
        assert await rollup_rows(conn, workspace_id) == maintained
    finally:
        await tx.rollback()


# 40 examples of two dozen statements each: about 10 s alone, past 30 s on a busy machine.
@pytest.mark.timeout(120)
@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    as_of=AS_OF,
    rows=st.lists(ROW, max_size=14),
    changes=st.lists(st.tuples(st.integers(0, 13), ROW), max_size=5),
)
async def test_rollup_counts_equal_raw_counts(
    db_pool: asyncpg.Pool, as_of: datetime, rows: list[Any], changes: list[Any]
) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Kathmandu")
    instances = [snap.instance(ws), snap.instance(ws)]
    records = fill(snap, instances, as_of, rows)
    await load(db_pool, snap)
    workspace_id = UUID(ws["id"])
    async with db_pool.acquire() as conn:
        await compare(conn, workspace_id, as_of)
        # A reload that changes rows: each keeps its id, its old contribution must leave.
        if records and changes:
            reload = Snapshot()
            reload.arrays["workspaces"].append(ws)
            reload.arrays["instances"].extend(instances)
            replaced = fill(reload, instances, as_of, [row for _, row in changes])
            for (index, _), record in zip(changes, replaced, strict=True):
                record["id"] = records[index % len(records)]["id"]
            unique = {r["id"]: r for r in replaced}
            reload.arrays["executions"] = list(unique.values())
            await load(db_pool, reload)
            await compare(conn, workspace_id, as_of)
        await assert_equals_rebuild(conn, workspace_id)


async def test_local_mean_time_boundaries_fall_back_to_rows(db_pool: asyncpg.Pool) -> None:
    """Kathmandu kept local mean time (+05:41:16) until 1920: `all` buckets of such data start
    at an instant no 15-minute slot begins at, and the answer still equals the rows'."""
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Kathmandu")
    inst = snap.instance(ws)
    snap.execution(inst, startedAt="1905-06-01T10:00:00Z", cost={"amount": "2"})
    snap.execution(inst, startedAt="1911-06-01T10:00:00Z", status="error")
    snap.execution(inst, startedAt="1930-06-01T10:00:00Z", status="crashed")
    await load(db_pool, snap)
    as_of = datetime(1931, 1, 1, 12, 7, tzinfo=UTC)
    async with db_pool.acquire() as conn:
        await compare(conn, UUID(ws["id"]), as_of)
    client = workspace_client(db_pool, ws, as_of)
    out = await client.call(
        "get_execution_stats", workspaceId=ws["id"], period="all", timeZone="Asia/Kathmandu"
    )
    assert out["totals"]["executions"] == 3
    # local midnight under LMT +05:41:16, written in UTC (its offset has seconds)
    assert out["buckets"][0]["at"] == "1904-12-31T18:18:44Z"
    assert sum(b["success"] + b["failed"] for b in out["buckets"]) == 3
    assert out["cost"]["amount"] == "2"


async def test_reload_moves_an_execution_between_slots_instances_and_states(
    db_pool: asyncpg.Pool,
) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    first, second = snap.instance(ws), snap.instance(ws)
    moved = snap.execution(first, startedAt="2025-01-15T08:00:00Z", status="error",
                           cost={"amount": "0.5"})  # fmt: skip
    await load(db_pool, snap)
    now = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
    client = workspace_client(db_pool, ws, now)

    async def today() -> dict[str, Any]:
        return await client.call(
            "get_execution_stats", workspaceId=ws["id"], period="today", timeZone="UTC"
        )

    out = await today()
    assert (out["totals"]["failed"], out["cost"]["amount"]) == (1, "0.5")
    moved.update(instanceId=second["id"], startedAt="2025-01-14T08:00:00Z", status="success",
                 cost=None)  # fmt: skip
    await load(db_pool, snap)
    out = await today()
    assert out["totals"]["executions"] == 0 and out["totals"]["excludedExecutions"] == 1
    assert out["cost"] is None and out["costCoverage"]["state"] == "not_applicable"
    async with db_pool.acquire() as conn:
        left = await conn.fetchval(
            "SELECT count(*) FROM execution_rollups WHERE instance_id = $1", UUID(first["id"])
        )
        assert left == 0  # emptied slots are deleted, not kept at zero
        await assert_equals_rebuild(conn, UUID(ws["id"]))
    moved.update(startedAt=None, createdAt=None)
    await load(db_pool, snap)
    out = await client.call(
        "get_execution_stats", workspaceId=ws["id"], period="all", timeZone="UTC"
    )
    assert out["totals"]["undatedExecutions"] == 1 and out["buckets"] == []


@pytest.mark.parametrize("zone", ["Asia/Kathmandu", "America/New_York"])
async def test_buckets_spanning_whole_days_read_the_daily_rollup(
    db_pool: asyncpg.Pool, zone: str
) -> None:
    """One row in each of 40 days, at 23:50 local: `30d` and `all` see every bucket right."""
    snap = Snapshot()
    ws = snap.workspace(timeZone=zone)
    inst = snap.instance(ws)
    as_of = datetime(2024, 11, 20, 12, 0, tzinfo=UTC)
    for day in range(40):
        local = (as_of.astimezone(ZoneInfo(zone)) - timedelta(days=day)).replace(
            hour=23, minute=50, second=0, microsecond=0
        )
        snap.execution(inst, startedAt=_stamp(local.astimezone(UTC)), status="error")
    await load(db_pool, snap)
    async with db_pool.acquire() as conn:
        await compare(conn, UUID(ws["id"]), as_of)
    out = await workspace_client(db_pool, ws, as_of).call(
        "get_execution_stats", workspaceId=ws["id"], period="30d", timeZone=zone
    )
    assert [b["failed"] for b in out["buckets"]] == [1] * 29 + [0]  # today's 23:50 is ahead
    assert out["totals"]["excludedExecutions"] == 11


@given(
    lo=st.integers(0, 6 * 96),
    width=st.integers(0, 4 * 96),
    offset=st.integers(-(10**6), 10**6),
)
def test_split_range_covers_each_slot_exactly_once(lo: int, width: int, offset: int) -> None:
    """Signed day and slot segments add up to [lo, hi): every slot inside counted once, every
    slot outside (including those a whole day adds and a subtraction removes) zero times."""
    base = offset * DAY_US
    start, end = base + lo * SLOT_US, base + (lo + width) * SLOT_US
    fine, days = split_range(start, end, 0)
    net: dict[int, int] = {}
    for seg_lo, seg_hi, _, sign in fine + days:
        for slot in range(seg_lo, seg_hi, SLOT_US):
            net[slot] = net.get(slot, 0) + sign
    assert {slot for slot, n in net.items() if n} == set(range(start, end, SLOT_US))
    assert all(n in (0, 1) for n in net.values())
    assert len(fine) <= 2 and len(days) <= 1
    assert sum((b - a) // SLOT_US for a, b, _, _ in fine) <= min(width, 96)
