"""Approval activity: counts kept per (approval, tool, hour) in each process, added up in
PostgreSQL across replicas, kept through a failed flush, bounded, flushed at shutdown, and
read back as calls in the last 24 hours and 7 days and the last use."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import UTC, datetime, timedelta

import aiohttp
import asyncpg
import pytest

from service.app_keys import DB_POOL
from service.auth import activity, activity_counts
from service.auth.activity import read_approval_activity
from service.auth.activity_counts import ActivityRecorder
from tests.auth.flow import bearer, seed_account, tool_call
from tests.support.server import InProcessServer
from tests.support.services import TestDatabase


async def _approval(pool: asyncpg.Pool) -> uuid.UUID:
    from service.auth.approvals import create_operator_client, grant_approval

    account = await seed_account(pool, workspaces=1)
    async with pool.acquire() as conn:
        client = await create_operator_client(conn, "activity test")
        granted = await grant_approval(
            conn,
            account_id=uuid.UUID(account.id),
            client_id=client,
            workspace_ids=[uuid.UUID(account.workspaces[0])],
            scopes="workspaces:read",
            expires="1d",
        )
    return granted.id


async def test_replicas_add_up_and_the_reader_windows(db_pool: asyncpg.Pool) -> None:
    approval = await _approval(db_pool)
    first, second = ActivityRecorder(), ActivityRecorder()
    for _ in range(3):
        first.record(approval, "get_many_workspaces")
    second.record(approval, "get_many_workspaces")
    second.record(approval, "get_many_executions")
    assert await first.flush(db_pool) == 1 and await second.flush(db_pool) == 2
    assert first.pending == second.pending == 0
    assert await first.flush(db_pool) == 0  # nothing pending: no statement
    # Older buckets: 30 hours ago counts for 7 days only; 8 days ago for neither.
    now = datetime.now(UTC)
    for age, calls in ((timedelta(hours=30), 5), (timedelta(days=8), 7)):
        await db_pool.execute(
            "INSERT INTO approval_activity (approval_id, hour, tool, calls, last_call_at)"
            " VALUES ($1, date_trunc('hour', $2::timestamptz), 'get_many_workspaces', $3, $2)",
            approval, now - age, calls,
        )  # fmt: skip
    other = uuid.uuid4()
    read = await read_approval_activity(db_pool, [approval, other])
    assert read[other].last_used is None and read[other].tools == ()
    got = read[approval]
    assert [(t.tool, t.last_day, t.last_week) for t in got.tools] == [
        ("get_many_workspaces", 4, 9),
        ("get_many_executions", 1, 1),
    ]
    assert got.last_used is not None and abs((got.last_used - now).total_seconds()) < 60


async def test_a_failed_flush_keeps_its_counts(
    test_database: TestDatabase, db_pool: asyncpg.Pool
) -> None:
    approval = await _approval(db_pool)
    recorder = ActivityRecorder()
    recorder.record(approval, "get_many_workspaces")
    broken = await asyncpg.connect(test_database.dsn)
    await broken.close()
    with pytest.raises(asyncpg.InterfaceError):
        await recorder.flush(broken)
    assert recorder.pending == 1
    recorder.record(approval, "get_many_workspaces")  # a call during the outage
    await recorder.flush(db_pool)
    read = await read_approval_activity(db_pool, [approval])
    assert read[approval].tools[0].last_day == 2


def test_pending_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(activity_counts, "MAX_PENDING", 2)
    recorder = ActivityRecorder()
    approval = uuid.uuid4()
    for tool in ("a", "b", "c"):
        recorder.record(approval, tool)
    recorder.record(approval, "a")  # a known counter still counts
    assert recorder.pending == 2 and recorder.dropped == 1


def test_counts_fall_in_hour_buckets() -> None:
    clock = [7200.0 * 1000 + 3599.0]
    recorder = ActivityRecorder(clock=lambda: clock[0])
    approval = uuid.uuid4()
    recorder.record(approval, "t")
    clock[0] += 2  # the next hour
    recorder.record(approval, "t")
    recorder.record(approval, "t")
    assert recorder.pending == 2


async def _calls(pool: asyncpg.Pool, approval: uuid.UUID) -> int:
    return int(
        await pool.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM approval_activity WHERE approval_id = $1",
            approval,
        )
    )


async def test_two_replicas_flush_on_their_own_and_at_shutdown(
    test_database: TestDatabase, db_pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with InProcessServer(test_database.dsn, replicas=2) as server:
        account = await seed_account(server.apps[0][DB_POOL], workspaces=1)
        issued = await server.approve(account=account.email, workspaces=account.workspaces)
        body, headers = tool_call("get_many_workspaces", {"limit": 5})
        async with aiohttp.ClientSession() as http:
            for base in server.base_urls:
                async with http.post(
                    base + "/mcp", json=body, headers=bearer(headers, issued.access_token)
                ) as resp:
                    assert resp.status == 200
            # Each replica flushes within about a second: both calls are counted.
            deadline = time.monotonic() + 10
            while await _calls(db_pool, issued.approval_id) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert await _calls(db_pool, issued.approval_id) == 2
            # With the periodic flush out of the way, shutdown still writes the last call.
            monkeypatch.setattr(activity, "FLUSH_SECONDS", 3600.0)
            await asyncio.sleep(1.5)  # each flusher has woken once more and sleeps for an hour
            async with http.post(
                server.mcp_url, json=body, headers=bearer(headers, issued.access_token)
            ) as resp:
                assert resp.status == 200
            assert await _calls(db_pool, issued.approval_id) == 2
    assert await _calls(db_pool, issued.approval_id) == 3


async def test_only_answered_tool_calls_count(test_database: TestDatabase) -> None:
    async with InProcessServer(test_database.dsn) as server:
        pool = server.apps[0][DB_POOL]
        account = await seed_account(pool, workspaces=1)
        issued = await server.approve(
            account=account.email, workspaces=account.workspaces, scope="workspaces:read"
        )
        calls = [
            ("get_workspace", {"workspaceId": str(uuid.uuid4())}, 200),  # a tool error counts
            ("no_such_tool", {}, 200),  # JSON-RPC error: not counted
            ("get_many_instances", {"workspaceId": account.workspaces[0]}, 403),  # no scope
        ]
        async with aiohttp.ClientSession() as http:
            for name, arguments, status in calls:
                body, headers = tool_call(name, arguments)
                async with http.post(
                    server.mcp_url, json=body, headers=bearer(headers, issued.access_token)
                ) as resp:
                    assert resp.status == status, await resp.text()
        await activity.flush_now(server.apps[0])
        read = await read_approval_activity(pool, [issued.approval_id])
    assert [(t.tool, t.last_day) for t in read[issued.approval_id].tools] == [("get_workspace", 1)]
