"""get_execution_stats against an independent oracle (docs/reading-rules.md): many executions at
random instants, at local midnights ± 1 ms of zones with :30 and :45 offsets, and around
asOf (in the same 15-minute slot, before and after), for every period. Totals, buckets and
the cost sum must equal what the rules compute from the rows themselves."""

from __future__ import annotations

import random
import zoneinfo
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest

from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import AuditFactory

zoneinfo.reset_tzpath(to=())
ZONES = ["Asia/Kathmandu", "America/St_Johns", "Pacific/Chatham", "UTC", "Pacific/Kiritimati"]
FAILED = {"error", "crashed"}
STATUSES = ["success", "error", "crashed", "canceled", "running", "waiting", "new", "unknown"]


def _z(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _midnight(d: date, zone: zoneinfo.ZoneInfo) -> datetime:
    return datetime.combine(d, time(0), tzinfo=zone).astimezone(UTC)


def _kind(status: str) -> str:
    return "success" if status == "success" else "failed" if status in FAILED else "other"


def _oracle(
    rows: list[dict[str, Any]], period: str, zone: zoneinfo.ZoneInfo, as_of: datetime
) -> dict[str, Any]:
    today = as_of.astimezone(zone).date()
    days = {"today": 1, "7d": 7, "30d": 30}.get(period)
    start = None if days is None else _midnight(today - timedelta(days=days - 1), zone)
    counted = []
    for r in rows:
        t = r["_t"]
        if period == "all" or (t is not None and start is not None and start <= t <= as_of):
            counted.append(r)
    totals = {"executions": len(counted), "success": 0, "failed": 0, "other": 0}
    for r in counted:
        totals[_kind(r["status"])] += 1
    totals["undatedExecutions"] = sum(1 for r in rows if r["_t"] is None)
    totals["excludedExecutions"] = len(rows) - len(counted)
    buckets: list[dict[str, Any]] = []
    if days is not None:
        starts = [_midnight(today - timedelta(days=d), zone) for d in range(days - 1, -1, -1)]
        for i, s in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            b: dict[str, Any] = {
                "at": s.astimezone(zone).isoformat(),
                "success": 0,
                "failed": 0,
                "other": 0,
            }
            for r in counted:
                t = r["_t"]
                if t is not None and s <= t and (t < end if end else t <= as_of):
                    b[_kind(r["status"])] += 1
            buckets.append(b)
    amounts = [Decimal(r["cost"]["amount"]) for r in counted if r.get("cost")]
    cost = None if not amounts else format(sum(amounts), "f")
    return {"totals": totals, "buckets": buckets, "cost": cost}


def _norm_amount(text: str) -> str:
    d = Decimal(text)
    return "0" if d == 0 else format(d.normalize(), "f")


@pytest.mark.parametrize("zone_name", ZONES)
async def test_stats_equal_the_oracle(audit: AuditFactory, zone_name: str) -> None:
    rng = random.Random(zone_name)
    zone = zoneinfo.ZoneInfo(zone_name)
    now = datetime.now(UTC)
    today = now.astimezone(zone).date()
    instants: list[datetime | None] = []
    for _ in range(250):
        instants.append(now - timedelta(seconds=rng.uniform(0, 40 * 86400)))
    for d in range(0, 32):
        m = _midnight(today - timedelta(days=d), zone)
        instants += [m, m - timedelta(milliseconds=1), m + timedelta(microseconds=1)]
    # Around asOf: same 15-minute slot, before and after; the request comes within a second.
    instants += [now - timedelta(minutes=3), now + timedelta(minutes=3), now + timedelta(days=2)]
    instants += [None] * 4
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    rows = []
    for t in instants:
        status = rng.choice(STATUSES)
        extra: dict[str, Any] = {}
        if rng.random() < 0.5:
            extra["cost"] = {"amount": f"{rng.randint(0, 10**6)}.{rng.randint(0, 999):03d}"}
        use_created = t is not None and rng.random() < 0.3
        row = snap.execution(
            inst,
            status=status,
            startedAt=None if (t is None or use_created) else _z(t),
            createdAt=None if t is None else (_z(t) if use_created else "2000-01-01T00:00:00Z"),
            **extra,
        )
        rows.append({**row, "_t": t})
    a = await audit(snap)
    for period in ("today", "7d", "30d", "all"):
        out = await a.ok(
            "get_execution_stats",
            {"workspaceId": ws["id"], "period": period, "timeZone": zone_name},
        )
        as_of = datetime.fromisoformat(out["asOf"])
        assert as_of.utcoffset() == as_of.astimezone(zone).utcoffset()
        want = _oracle(rows, period, zone, as_of)
        assert out["totals"] == want["totals"], period
        if period != "all":
            assert out["buckets"] == want["buckets"], period
        else:
            dated = [r for r in rows if r["_t"] is not None and r["_t"] <= as_of]
            assert sum(b["success"] + b["failed"] + b["other"] for b in out["buckets"]) == len(
                dated
            )
        got_cost = None if out["cost"] is None else out["cost"]["amount"]
        assert got_cost == (None if want["cost"] is None else _norm_amount(want["cost"])), period
