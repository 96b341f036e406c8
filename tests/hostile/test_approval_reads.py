"""Concurrent requests of one approval share the authorization step's reads, and never a read
that began before they arrived (service/auth/authorization.py, ApprovalReads)."""

from __future__ import annotations

import asyncio

from service.app_keys import APPROVAL_READS, DB_POOL, METRICS
from tests.hostile.conftest import Hostile


def _reads(h: Hostile) -> float:
    value = h.app[METRICS].registry.get_sample_value(
        "elova_mcp_db_call_duration_seconds_count", {"operation": "auth"}
    )
    return value or 0.0


async def test_requests_arriving_together_share_one_read(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    before = _reads(hostile)
    rows = await asyncio.gather(
        *(hostile.app[APPROVAL_READS].read(a.approval_id) for _ in range(20))
    )
    assert _reads(hostile) - before == 1
    assert all(row == rows[0] for row in rows) and rows[0] is not None


async def test_a_request_arriving_during_a_read_waits_for_the_next_one(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    reads = hostile.app[APPROVAL_READS]
    before = _reads(hostile)
    async with hostile.app[DB_POOL].acquire() as lock:
        tx = lock.transaction()
        await tx.start()
        # approval_state joins approval_workspaces: the first read waits on this lock.
        await lock.execute("LOCK TABLE approval_workspaces IN ACCESS EXCLUSIVE MODE")
        first = asyncio.ensure_future(reads.read(a.approval_id))
        await asyncio.sleep(0.2)
        assert not first.done()
        # Revoked after the first read began: requests from now on must see it.
        await hostile.app[DB_POOL].execute(
            "UPDATE approvals SET revoked_at = now() WHERE id = $1", a.approval_id
        )
        later = [asyncio.ensure_future(reads.read(a.approval_id)) for _ in range(3)]
        await asyncio.sleep(0.05)
        await tx.commit()
    await first
    rows = await asyncio.gather(*later)
    assert all(row is not None and row["revoked"] for row in rows)
    assert _reads(hostile) - before == 2  # the first alone, the three later ones together


async def test_a_request_that_goes_away_leaves_the_read_to_the_others(hostile: Hostile) -> None:
    a = hostile.world.approvals["a"]
    reads = hostile.app[APPROVAL_READS]
    leaving = asyncio.ensure_future(reads.read(a.approval_id))
    staying = asyncio.ensure_future(reads.read(a.approval_id))
    await asyncio.sleep(0)
    leaving.cancel()
    row = await staying
    assert row is not None and not row["revoked"]
