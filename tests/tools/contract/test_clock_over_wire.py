"""Period windows on the days that are easy to get wrong, end to end over /mcp: the app's
clock (the CLOCK app key) is pinned to a DST-change day, so `today`/`7d` windows and daily
buckets are checked through the transport, not only on the pure period functions."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from service.app import create_app
from service.app_keys import CLOCK, DB_POOL, TOKENS
from service.config import Config
from service.store.load_snapshot import load_snapshot
from tests.support.approvals import Member, granted
from tests.support.snapshots import Snapshot, member
from tests.tools.contract.conftest import Audit, ClientFactory


async def _audit_at(
    aiohttp_client: ClientFactory, config: Config, now: datetime, snap: Snapshot
) -> Audit:
    app = create_app(config)
    app[CLOCK] = lambda: now
    client = await aiohttp_client(app)
    async with client.app[DB_POOL].acquire() as conn:
        await load_snapshot(conn, snap.document())
    owner = snap.arrays["accounts"][0]
    ids = [uuid.UUID(str(ws["id"])) for ws in snap.arrays["workspaces"]]
    who = Member(uuid.UUID(owner["id"]), owner["email"], ids, uuid.uuid4())
    _, issued = await granted(client.app[DB_POOL], client.app[TOKENS], who)
    return Audit(client, issued.access_token)


def _world(zone: str, started: list[str]) -> tuple[Snapshot, str]:
    snap = Snapshot()
    owner = snap.account()
    ws = snap.workspace(timeZone=zone, members=[member(owner)])
    inst = snap.instance(ws)
    for at in started:
        snap.execution(inst, startedAt=at, createdAt=at, status="success")
    return snap, str(ws["id"])


async def test_santiago_today_starts_at_the_first_existing_instant(
    aiohttp_client: ClientFactory, config: Config
) -> None:
    # 2026-09-06: Chile's clocks jump from 00:00 to 01:00, so the day starts at 01:00 -03:00
    # (04:00Z). A run at 03:59:59Z belongs to the day before; one at 04:00Z to today.
    snap, ws = _world("America/Santiago", ["2026-09-06T03:59:59Z", "2026-09-06T04:00:00Z"])
    audit = await _audit_at(aiohttp_client, config, datetime(2026, 9, 6, 15, tzinfo=UTC), snap)
    stats = await audit.ok(
        "get_execution_stats",
        {"workspaceId": ws, "period": "today", "timeZone": "America/Santiago"},
    )
    assert [b["at"] for b in stats["buckets"]] == ["2026-09-06T01:00:00-03:00"]
    assert stats["totals"]["executions"] == 1 and stats["buckets"][0]["success"] == 1
    listed = await audit.ok(
        "get_many_executions",
        {"workspaceId": ws, "period": "today"},  # the workspace zone
    )
    assert [e["startedAt"] for e in listed["executions"]] == ["2026-09-06T04:00:00Z"]
    assert listed["asOf"] == "2026-09-06T12:00:00-03:00"


async def test_berlin_week_across_the_spring_change(
    aiohttp_client: ClientFactory, config: Config
) -> None:
    started = ["2026-03-28T23:30:00Z", "2026-03-29T22:30:00Z"]  # 00:30 local, both days
    snap, ws = _world("Europe/Berlin", started)
    audit = await _audit_at(aiohttp_client, config, datetime(2026, 3, 31, 9, tzinfo=UTC), snap)
    stats: dict[str, Any] = await audit.ok(
        "get_execution_stats", {"workspaceId": ws, "period": "7d", "timeZone": "Europe/Berlin"}
    )
    ats = [b["at"] for b in stats["buckets"]]
    assert ats[0] == "2026-03-25T00:00:00+01:00" and ats[-1] == "2026-03-31T00:00:00+02:00"
    assert "2026-03-29T00:00:00+01:00" in ats and "2026-03-30T00:00:00+02:00" in ats
    by_day = {b["at"][:10]: b["success"] for b in stats["buckets"]}
    assert by_day["2026-03-29"] == 1 and by_day["2026-03-30"] == 1
