"""get_many_instances against real PostgreSQL, outputs schema-checked."""

from __future__ import annotations

import asyncpg
import pytest

from service.errors import NotFound, ValidationError
from service.tools.cursors import CursorCodec
from tests.support.snapshots import Snapshot, new_id, sync_state
from tests.tools.inventory_support import client_for, codec_for, load


@pytest.fixture
def codec(signing_key_pem: bytes) -> CursorCodec:
    return codec_for(signing_key_pem)


async def test_instances_in_order_with_current_workflow_counts(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    prod = snap.instance(
        ws,
        name="b\x1bprod",
        lastSyncAt="2025-01-15T10:35:12.250+01:00",
        lastExecutionSyncAt=None,
        historyComplete=False,
        syncState=sync_state(
            pending=True,
            scope="executions",
            status="failed",
            errorCode="N8N_AUTH_FAILED",
            lastAttemptAt="2025-01-15T09:00:00.123456Z",
        ),
    )
    empty = snap.instance(ws, name="a" * 300, status="pending", lastSyncAt=None)
    snap.workflow(prod)
    snap.workflow(prod, archived=False, definitionAvailable=True)
    snap.workflow(prod, present=False)
    snap.workflow(prod, archived=True)
    snap.workflow(prod, definitionAvailable=False)
    snap.instance(snap.workspace(), name="elsewhere")
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)

    got = await client.call("get_many_instances", workspaceId=ws["id"])
    assert got["workspaceId"] == ws["id"]
    first, second = got["instances"]
    assert (first["id"], first["name"], first["status"]) == (empty["id"], "a" * 200, "pending")
    assert (first["workflowCount"], first["lastSyncAt"]) == (0, None)
    assert second == {
        "id": prod["id"],
        "name": "b\ufffdprod",
        "status": "connected",
        "autoSyncEnabled": True,
        "workflowIntervalMinutes": 60,
        "lastSyncAt": "2025-01-15T09:35:12.250Z",
        "lastWorkflowSyncAt": "2025-01-15T09:30:00Z",
        "lastExecutionSyncAt": None,
        "workflowCount": 2,
        "historyComplete": False,
        "syncState": {
            "pending": True,
            "scope": "executions",
            "status": "failed",
            "errorCode": "N8N_AUTH_FAILED",
            "lastAttemptAt": "2025-01-15T09:00:00.123456Z",
        },
    }


async def test_only_the_first_twenty(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    made = [snap.instance(ws, name=f"i{n:02d}") for n in range(23)]
    await load(db_pool, snap)
    got = await client_for(db_pool, codec, ws).call("get_many_instances", workspaceId=ws["id"])
    assert [i["id"] for i in got["instances"]] == [i["id"] for i in made[:20]]


async def test_not_found_and_bad_arguments(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws, foreign = snap.workspace(), snap.workspace()
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)
    for missing in (foreign["id"], new_id()):
        with pytest.raises(NotFound):
            await client.call("get_many_instances", workspaceId=missing)
    with pytest.raises(ValidationError):
        await client.call("get_many_instances", workspaceId=ws["id"], limit=5)
    assert (await client.call("get_many_instances", workspaceId=ws["id"].upper()))[
        "workspaceId"
    ] == ws["id"]
