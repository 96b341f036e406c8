"""get_many_workspaces and get_workspace against real PostgreSQL, outputs schema-checked."""

from __future__ import annotations

import base64
from dataclasses import replace
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from service.errors import CursorStale, NotFound, ValidationError
from service.tools.cursors import CursorCodec
from tests.support.snapshots import Snapshot, document, member, new_id
from tests.tools.inventory_support import Client, client_for, codec_for, load

ASTRAL = "\U0001d538"  # MATHEMATICAL DOUBLE-STRUCK CAPITAL A, beyond the BMP


@pytest.fixture
def codec(signing_key_pem: bytes) -> CursorCodec:
    return codec_for(signing_key_pem)


async def make(
    pool: asyncpg.Pool, codec: CursorCodec, names: list[str]
) -> tuple[Client, list[dict[str, Any]]]:
    snap = Snapshot()
    owner = snap.account()
    spaces = [snap.workspace(name=n, members=[member(owner)]) for n in names]
    await load(pool, snap)
    return client_for(pool, codec, *spaces), spaces


async def test_lists_eligible_workspaces_in_code_point_order(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    names = [ASTRAL + "x", "é", "a", "Z", "a", "b\x01c", "l" * 250]
    client, spaces = await make(db_pool, codec, names)
    client.workspaces[UUID(spaces[2]["id"])] = "member"
    other = Snapshot()
    other.workspace(name="A not granted")
    await load(db_pool, other)

    page = await client.call("get_many_workspaces")
    got = [(w["name"], w["id"]) for w in page["workspaces"]]
    a_ids = sorted([spaces[2]["id"], spaces[4]["id"]])
    assert got == [
        ("Z", spaces[3]["id"]),
        ("a", a_ids[0]),
        ("a", a_ids[1]),
        ("b\ufffdc", spaces[5]["id"]),
        ("l" * 200, spaces[6]["id"]),
        ("é", spaces[1]["id"]),
        (ASTRAL + "x", spaces[0]["id"]),
    ]
    assert page["nextCursor"] is None
    roles = {w["id"]: w["role"] for w in page["workspaces"]}
    assert roles[spaces[2]["id"]] == "member" and roles[spaces[3]["id"]] == "owner"
    assert all(w["timeZone"] == "Europe/Berlin" for w in page["workspaces"])


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
async def test_cursor_walk_returns_every_row_once(
    db_pool: asyncpg.Pool, codec: CursorCodec, limit: int
) -> None:
    client, spaces = await make(db_pool, codec, ["m", "m", "k", ASTRAL, "é", "A"])
    full = (await client.call("get_many_workspaces"))["workspaces"]
    rows, pages = await client.walk("get_many_workspaces", limit=limit)
    assert rows == full and len(rows) == len(spaces)
    assert pages == -(-len(spaces) // limit)


async def test_cursor_is_short_and_bound(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    client, spaces = await make(db_pool, codec, ["x" * 5000, "y", "z"])
    cursor = (await client.call("get_many_workspaces", limit=1))["nextCursor"]
    assert cursor is not None and len(cursor) <= 120

    flipped = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1:]
    padded = base64.urlsafe_b64encode(base64.urlsafe_b64decode(cursor + "==")).decode()
    elsewhere = {**client.workspaces, UUID(new_id()): "owner"}
    cases = [
        (client, flipped, 1),  # tampered
        (client, padded, 1),  # the same bytes, re-encoded with padding
        (client, cursor, 2),  # another limit
        (replace(client, account_id=UUID(new_id())), cursor, 1),  # another account
        (replace(client, approval_id=UUID(new_id())), cursor, 1),  # another approval
        (replace(client, generation=2), cursor, 1),  # the approval was renewed
        (replace(client, workspaces=elsewhere), cursor, 1),  # another eligible set
    ]
    for who, presented, limit in cases:
        with pytest.raises(ValidationError):
            await who.call("get_many_workspaces", cursor=presented, limit=limit)


async def test_a_workflows_cursor_is_not_a_workspaces_cursor(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    snap.workflow(inst)
    snap.workflow(inst)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)
    cursor = (await client.call("get_many_workflows", workspaceId=ws["id"], limit=1))["nextCursor"]
    with pytest.raises(ValidationError):
        await client.call("get_many_workspaces", cursor=cursor, limit=1)


async def test_renamed_anchor_makes_the_cursor_stale(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    client, spaces = await make(db_pool, codec, ["p", "q", "r"])
    cursor = (await client.call("get_many_workspaces", limit=1))["nextCursor"]
    spaces[0]["name"] = "p2"
    await load(db_pool, document(workspaces=[spaces[0]]))
    with pytest.raises(CursorStale) as caught:
        await client.call("get_many_workspaces", cursor=cursor, limit=1)
    assert caught.value.text == "MCP_CURSOR_STALE: Read settings changed. Restart without a cursor."


async def test_pages_stay_within_a_small_response_bound(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    # Worst-case 200-code-point names: 4-byte characters, and quotes and backslashes that the
    # text copy of the result escapes again.
    names = [f"{i:02d}" + '"\\' * 40 + ASTRAL * 118 for i in range(12)]
    client, spaces = await make(db_pool, codec, names)
    client.max_response_bytes = 6000
    first = await client.call("get_many_workspaces")
    assert 0 < len(first["workspaces"]) < len(spaces) and first["nextCursor"]
    rows, pages = await client.walk("get_many_workspaces")
    assert [w["id"] for w in rows] == [s["id"] for s in spaces]  # names sort by their prefix
    assert pages > 1


async def test_get_workspace(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    client, spaces = await make(db_pool, codec, ["Ops\x7fteam"])
    other = Snapshot()
    foreign = other.workspace()
    await load(db_pool, other)
    got = await client.call("get_workspace", workspaceId=spaces[0]["id"].upper())
    assert got == {
        "workspace": {
            "id": spaces[0]["id"],
            "name": "Ops\ufffdteam",
            "timeZone": "Europe/Berlin",
            "role": "owner",
        }
    }
    for missing in (foreign["id"], new_id()):
        with pytest.raises(NotFound):
            await client.call("get_workspace", workspaceId=missing)
    with pytest.raises(ValidationError):
        await client.call("get_workspace", workspaceId="not-a-uuid")
    with pytest.raises(ValidationError):
        await client.call("get_workspace", workspaceId=spaces[0]["id"], extra=1)


async def test_limit_bounds(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    client, _ = await make(db_pool, codec, ["a", "b"])
    assert len((await client.call("get_many_workspaces", limit=1.0))["workspaces"]) == 1
    for bad in (0, 51, 1.5, "1", None):
        with pytest.raises(ValidationError):
            await client.call("get_many_workspaces", limit=bad)
    for bad_cursor in ("", "x" * 1025, None):
        with pytest.raises(ValidationError):
            await client.call("get_many_workspaces", cursor=bad_cursor)
