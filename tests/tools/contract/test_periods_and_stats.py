"""docs/reading-rules.md and the fine print on statistics, through /mcp with the real clock:
period windows at local midnight, daily buckets, `all` bucket units, undated and future-dated
rows, excluded executions, failed = error + crashed, cost sums and cost coverage states.
DST gaps at midnight cannot be reached with today's clock, so they are checked on the pure
window functions."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest

from service.rules.periods import daily_buckets, window_start
from service.rules.shaping import format_local
from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import Audit, AuditFactory

zoneinfo.reset_tzpath(to=())
ZONE = "Asia/Kathmandu"  # +05:45: a window computed in UTC or whole hours is visibly wrong


def _z(instant: datetime) -> str:
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _midnight(day: date, zone: str) -> datetime:
    return datetime.combine(day, time(0), tzinfo=zoneinfo.ZoneInfo(zone))


def _at(day: date, zone: str) -> str:
    return _midnight(day, zone).isoformat()


def _today(zone: str) -> date:
    return datetime.now(UTC).astimezone(zoneinfo.ZoneInfo(zone)).date()


async def _stats(a: Audit, ws: str, period: str, zone: str = ZONE) -> dict[str, Any]:
    out = await a.ok("get_execution_stats", {"workspaceId": ws, "period": period, "timeZone": zone})
    t = out["totals"]
    assert t["executions"] == t["success"] + t["failed"] + t["other"]
    assert out["usage"] is None
    assert out["asOf"].endswith("+05:45") if zone == ZONE else True
    return out


async def test_windows_buckets_undated_future_and_excluded(audit: AuditFactory) -> None:
    today = _today(ZONE)
    start = {
        p: _midnight(today - timedelta(days=n - 1), ZONE)
        for p, n in (("today", 1), ("7d", 7), ("30d", 30))
    }
    ms = timedelta(milliseconds=1)
    snap = Snapshot()
    ws = snap.workspace(timeZone="Europe/Berlin", executionPollIntervalSeconds=120)
    inst = snap.instance(ws)
    snap.execution(inst, status="success", startedAt=None, createdAt=_z(start["today"]))
    snap.execution(inst, status="error", startedAt=_z(start["today"] - ms))
    snap.execution(inst, status="crashed", startedAt=_z(start["7d"]))
    snap.execution(inst, status="canceled", startedAt=_z(start["7d"] - ms))
    snap.execution(inst, status="waiting", startedAt=_z(start["30d"]))
    snap.execution(inst, status="unknown", startedAt=_z(start["30d"] - ms))
    snap.execution(inst, status="error", startedAt=None, createdAt=None)  # undated
    snap.execution(inst, status="success", startedAt=_z(datetime.now(UTC) + timedelta(days=3)))
    a = await audit(snap)
    wid = ws["id"]
    expect = {  # executions, success, failed, other
        "today": (1, 1, 0, 0),
        "7d": (3, 1, 2, 0),
        "30d": (5, 1, 2, 2),
        "all": (8, 2, 3, 3),
    }
    for period, (n, s, f, o) in expect.items():
        out = await _stats(a, wid, period)
        t = out["totals"]
        assert (t["executions"], t["success"], t["failed"], t["other"]) == (n, s, f, o), period
        assert t["undatedExecutions"] == 1
        assert t["excludedExecutions"] == 8 - n
        assert out["sync"] == {"executionPollIntervalSeconds": 120}
        assert out["timeZone"] == ZONE and out["period"] == period
        if period != "all":
            days = {"today": 1, "7d": 7, "30d": 30}[period]
            dates = [today - timedelta(days=d) for d in range(days - 1, -1, -1)]
            assert [b["at"] for b in out["buckets"]] == [_at(d, ZONE) for d in dates]
            assert sum(b["success"] + b["failed"] + b["other"] for b in out["buckets"]) == n
    # `all`: the first dated row is 30 days and 1 ms back: 31+ days, so ISO weeks.
    out = await _stats(a, wid, "all")
    first = (start["30d"] - ms).astimezone(zoneinfo.ZoneInfo(ZONE)).date()
    monday = first - timedelta(days=first.weekday())
    assert out["buckets"][0]["at"] == _at(monday, ZONE)
    assert all(
        b["at"] == _at(monday + timedelta(weeks=i), ZONE) for i, b in enumerate(out["buckets"])
    )
    # Neither the undated row nor the one after asOf is in a bucket.
    assert sum(b["success"] + b["failed"] + b["other"] for b in out["buckets"]) == 6


async def test_all_with_only_future_rows_has_totals_and_no_buckets(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    snap.execution(inst, startedAt=_z(datetime.now(UTC) + timedelta(days=400)))
    a = await audit(snap)
    out = await _stats(a, ws["id"], "all")
    assert out["totals"]["executions"] == 1 and out["buckets"] == []
    assert (await _stats(a, ws["id"], "today"))["totals"]["executions"] == 0


@pytest.mark.parametrize(
    ("first_days_back", "unit"),
    [(29, "day"), (200, "week"), (800, "month"), (2000, "quarter"), (3000, "year")],
)
async def test_all_bucket_unit_is_the_smallest_within_30(
    audit: AuditFactory, first_days_back: int, unit: str
) -> None:
    zone = "America/New_York"
    snap = Snapshot()
    ws = snap.workspace(timeZone=zone)
    inst = snap.instance(ws)
    now = datetime.now(UTC)
    snap.execution(inst, startedAt=_z(now - timedelta(days=first_days_back)))
    snap.execution(inst, startedAt=_z(now - timedelta(minutes=1)))
    a = await audit(snap)
    out = await a.ok(
        "get_execution_stats", {"workspaceId": ws["id"], "period": "all", "timeZone": zone}
    )
    first = (now - timedelta(days=first_days_back)).astimezone(zoneinfo.ZoneInfo(zone)).date()
    last = (now - timedelta(minutes=1)).astimezone(zoneinfo.ZoneInfo(zone)).date()
    starts: list[date] = []
    d = {
        "day": first,
        "week": first - timedelta(days=first.weekday()),
        "month": first.replace(day=1),
        "quarter": date(first.year, 3 * ((first.month - 1) // 3) + 1, 1),
        "year": date(first.year, 1, 1),
    }[unit]
    while d <= last:
        starts.append(d)
        if unit == "day":
            d += timedelta(days=1)
        elif unit == "week":
            d += timedelta(weeks=1)
        else:
            m = d.year * 12 + d.month - 1 + {"month": 1, "quarter": 3, "year": 12}[unit]
            d = date(m // 12, m % 12 + 1, 1)
    assert len(starts) <= 30
    assert [b["at"] for b in out["buckets"]] == [_at(s, zone) for s in starts]
    assert sum(b["success"] for b in out["buckets"]) == 2


@pytest.mark.parametrize(
    ("zone", "now", "period", "start"),
    [
        # Santiago skips 2026-09-06 00:00 (clocks go to 01:00, -04 → -03).
        ("America/Santiago", "2026-09-06T12:00:00Z", "today", "2026-09-06T01:00:00-03:00"),
        ("America/Santiago", "2026-09-12T12:00:00Z", "7d", "2026-09-06T01:00:00-03:00"),
        # Azores skip 2026-03-29 00:00 (-01 → +00 at 00:00 local).
        ("Atlantic/Azores", "2026-03-29T12:00:00Z", "today", "2026-03-29T01:00:00+00:00"),
        # Beirut 2026-03-29 00:00 → 01:00.
        ("Asia/Beirut", "2026-04-27T12:00:00Z", "30d", "2026-03-29T01:00:00+03:00"),
        # Fall-back at midnight (Havana 2025-11-02 01:00 → 00:00): the first midnight.
        ("America/Havana", "2025-11-02T12:00:00Z", "today", "2025-11-02T00:00:00-04:00"),
    ],
)
def test_window_starts_at_the_first_existing_local_instant(
    zone: str, now: str, period: str, start: str
) -> None:
    tz = zoneinfo.ZoneInfo(zone)
    at = datetime.fromisoformat(now)
    got = window_start(period, at, tz)
    assert got is not None and format_local(got, tz) == start
    assert format_local(daily_buckets(period, at, tz).starts[0], tz) == start


async def test_unknown_or_miscased_zone_is_a_validation_error(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    a = await audit(snap)
    for zone in ("Mars/Base", "europe/berlin", "Europe/Berlin ", "", "Local", "../etc/passwd"):
        err = await a.error(
            "get_execution_stats", {"workspaceId": ws["id"], "period": "7d", "timeZone": zone}
        )
        assert err["code"] == "VALIDATION_ERROR", zone
        err = await a.error("get_many_executions", {"workspaceId": ws["id"], "timeZone": zone})
        assert err["code"] == "VALIDATION_ERROR", zone


def _cov(state: str, priced: int = 1, **more: int) -> dict[str, Any]:
    return {"state": state, "pricedComponents": priced, "unresolvedComponents": 0,
            "excludedComponents": 0, "observations": 1, **more}  # fmt: skip


async def _all_stats(audit: AuditFactory, rows: list[dict[str, Any]]) -> dict[str, Any]:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for row in rows:
        snap.execution(inst, **row)
    a = await audit(snap)
    return await a.ok(
        "get_execution_stats", {"workspaceId": ws["id"], "period": "all", "timeZone": "UTC"}
    )


async def test_cost_sum_is_exact_and_formatted(audit: AuditFactory) -> None:
    out = await _all_stats(audit, [
        {"cost": {"amount": "0.1"}, "costCoverage": _cov("complete")},
        {"cost": {"amount": "0.2"}, "costCoverage": _cov("complete")},
        {"cost": {"amount": "1.500"}, "costCoverage": _cov("complete")},
    ])  # fmt: skip
    assert out["cost"] == {
        "amount": "1.8",
        "currency": "USD",
        "kind": "estimated",
        "basis": "openrouter",
    }
    assert out["costCoverage"]["state"] == "complete"
    assert out["costCoverage"]["pricedComponents"] == 3 and out["costCoverage"]["observations"] == 3
    assert "missingMappingObservations" not in out["costCoverage"]


async def test_zero_cost_sum_is_0(audit: AuditFactory) -> None:
    out = await _all_stats(audit, [{"cost": {"amount": "0.000"}, "costCoverage": _cov("complete")}])
    assert out["cost"]["amount"] == "0"


async def test_cost_sum_over_38_integer_digits_is_null_and_partial(audit: AuditFactory) -> None:
    big = "9" * 38
    out = await _all_stats(audit, [
        {"cost": {"amount": big}, "costCoverage": _cov("complete")},
        {"cost": {"amount": "1"}, "costCoverage": _cov("complete")},
    ])  # fmt: skip
    assert out["cost"] is None
    assert out["costCoverage"]["state"] == "partial"


@pytest.mark.parametrize(
    ("rows", "state", "cost"),
    [
        ([], "not_applicable", None),
        ([{"cost": None}, {}], "unavailable", None),
        ([{"cost": {"amount": "2"}, "costCoverage": _cov("complete")}, {}], "partial", "2"),
        ([{"cost": {"amount": "2"}, "costCoverage": _cov("partial")}], "partial", "2"),
        ([{"cost": {"amount": "2"}}], "partial", "2"),
    ],
)
async def test_cost_coverage_states(
    audit: AuditFactory, rows: list[dict[str, Any]], state: str, cost: str | None
) -> None:
    out = await _all_stats(audit, rows)
    assert out["costCoverage"]["state"] == state
    assert (out["cost"] or {}).get("amount") == cost


async def test_missing_mapping_observations_sum_only_when_carried(audit: AuditFactory) -> None:
    out = await _all_stats(audit, [
        {"cost": {"amount": "1"}, "costCoverage": _cov("complete", missingMappingObservations=2)},
        {"cost": {"amount": "1"}, "costCoverage": _cov("complete", missingMappingObservations=3)},
        {"cost": {"amount": "1"}, "costCoverage": _cov("complete")},
    ])  # fmt: skip
    assert out["costCoverage"]["missingMappingObservations"] == 5
