"""get_many_sync_jobs against real PostgreSQL, outputs schema-checked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from service.errors import NotFound, ValidationError
from service.tools.cursors import CursorCodec
from tests.support.snapshots import Snapshot, new_id
from tests.tools.inventory_support import Client, client_for, codec_for, load


@pytest.fixture
def codec(signing_key_pem: bytes) -> CursorCodec:
    return codec_for(signing_key_pem)


def at(minutes: int) -> str:
    return (datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)).isoformat()


async def setup(
    pool: asyncpg.Pool, codec: CursorCodec, count: int
) -> tuple[Client, dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    jobs = [snap.sync_job(inst, createdAt=at(n)) for n in range(count)]
    await load(pool, snap)
    return client_for(pool, codec, ws), ws, inst, jobs


def newest_first(jobs: list[dict[str, Any]]) -> list[str]:
    return [j["id"] for j in sorted(jobs, key=lambda j: (j["createdAt"], j["id"]), reverse=True)]


@pytest.mark.parametrize(
    ("count", "limit", "truncated"),
    [(0, 50, False), (3, 3, False), (4, 3, True), (50, 50, False), (51, 50, True), (130, 50, True)],
)
async def test_window_and_truncated(
    db_pool: asyncpg.Pool, codec: CursorCodec, count: int, limit: int, truncated: bool
) -> None:
    client, ws, inst, jobs = await setup(db_pool, codec, count)
    got = await client.call(
        "get_many_sync_jobs", workspaceId=ws["id"], instanceId=inst["id"], limit=limit
    )
    assert [j["id"] for j in got["jobs"]] == newest_first(jobs)[:limit]
    assert got["truncated"] is truncated


async def test_ties_on_created_at_order_by_id_descending(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    jobs = [snap.sync_job(inst, createdAt="2025-01-15T10:00:00+01:00") for _ in range(5)]
    older = snap.sync_job(
        inst,
        createdAt="2025-01-15T08:59:59.999Z",
        status="failed",
        finishedAt=None,
        errorCode="N8N_TIMEOUT",
        trigger="manual",
        scope="all",
    )
    await load(db_pool, snap)
    got = await client_for(db_pool, codec, ws).call(
        "get_many_sync_jobs", workspaceId=ws["id"], instanceId=inst["id"].upper()
    )
    assert [j["id"] for j in got["jobs"]] == sorted((j["id"] for j in jobs), reverse=True) + [
        older["id"]
    ]
    assert got["jobs"][0]["createdAt"] == "2025-01-15T09:00:00Z"
    assert got["jobs"][-1] == {
        "id": older["id"],
        "instanceId": inst["id"],
        "scope": "all",
        "trigger": "manual",
        "status": "failed",
        "createdAt": "2025-01-15T08:59:59.999Z",
        "finishedAt": None,
        "errorCode": "N8N_TIMEOUT",
    }
    assert (got["instanceId"], got["truncated"]) == (inst["id"], False)


async def test_instance_must_be_in_the_workspace(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws, other = snap.workspace(), snap.workspace()
    foreign = snap.instance(other)
    snap.sync_job(foreign)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws, other)
    for instance_id in (foreign["id"], new_id()):
        with pytest.raises(NotFound):
            await client.call("get_many_sync_jobs", workspaceId=ws["id"], instanceId=instance_id)
    with pytest.raises(NotFound):  # the workspace is not granted
        await client_for(db_pool, codec, ws).call(
            "get_many_sync_jobs", workspaceId=other["id"], instanceId=foreign["id"]
        )
    with pytest.raises(ValidationError):
        await client.call("get_many_sync_jobs", workspaceId=ws["id"])
    with pytest.raises(ValidationError):  # arguments are checked before existence
        await client.call(
            "get_many_sync_jobs", workspaceId=new_id(), instanceId=foreign["id"], limit=0
        )
