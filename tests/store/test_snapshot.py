"""The snapshot loader against real PostgreSQL: what is stored, what a bad file changes
(nothing), and how errors name the record and field."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

from service.errors import LoadError
from service.passwords import verify_password
from service.rules.inventory import MAX_INVENTORY_BYTES
from service.store.load_snapshot import load_snapshot
from tests.support.snapshots import ABSENT, Snapshot, document, member, new_id, node


@pytest.fixture
async def conn(db_pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    async with db_pool.acquire() as connection:
        yield connection


def small_snapshot() -> tuple[Snapshot, dict[str, Any]]:
    snap = Snapshot()
    owner = snap.account(password="correct horse")
    ws = snap.workspace(name="Ops\x07team", members=[member(owner, "admin")])
    inst = snap.instance(ws, name="Prod\x00n8n")
    job = snap.sync_job(inst)
    wf = snap.workflow(inst, name="Orders\u0085", archived=None, nodes=[node(), node()])
    return snap, {"owner": owner, "ws": ws, "inst": inst, "job": job, "wf": wf}


async def test_loads_every_array_and_sanitises_names(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    report = await load_snapshot(conn, snap.document())
    assert (report.accounts, report.workspaces, report.memberships) == (1, 1, 1)
    assert (report.instances, report.sync_jobs, report.workflows, report.executions) == (1, 1, 1, 0)
    assert "1 workflows" in report.summary()

    ws = await conn.fetchrow("SELECT * FROM workspaces WHERE id = $1", _uuid(r["ws"]))
    assert ws["name"] == "Ops\ufffdteam"
    assert (ws["read_generation"], ws["execution_poll_interval_seconds"]) == (1, 300)
    inst = await conn.fetchrow("SELECT name FROM instances WHERE id = $1", _uuid(r["inst"]))
    assert inst["name"] == "Prod\ufffdn8n"
    wf = await conn.fetchrow("SELECT * FROM workflows WHERE id = $1", _uuid(r["wf"]))
    assert wf["name"] == "Orders\ufffd"
    assert wf["workspace_id"] == _uuid(r["ws"])
    assert (wf["archived_known"], wf["archived"]) == (True, None)
    assert (wf["definition_available"], wf["definition_removed_known"]) == (None, False)
    assert (wf["node_count"], wf["nodes_truncated"]) == (2, False)
    assert [n["id"] for n in json.loads(wf["nodes_inventory"])] == [
        n["id"] for n in r["wf"]["nodes"]
    ]
    role = await conn.fetchval(
        "SELECT role FROM memberships WHERE account_id = $1", _uuid(r["owner"])
    )
    assert role == "admin"
    stored = await conn.fetchval(
        "SELECT password_hash FROM accounts WHERE id = $1", _uuid(r["owner"])
    )
    assert stored.startswith("scrypt$") and "correct horse" not in stored
    assert verify_password("correct horse", stored)
    assert not verify_password("wrong", stored)


async def test_reloading_the_same_file_is_idempotent(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    await load_snapshot(conn, snap.document())
    before = await _rows(conn, r)
    await load_snapshot(conn, snap.document())
    assert await _rows(conn, r) == before


async def test_a_bad_record_at_the_end_changes_nothing(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    bad = snap.workflow(r["inst"], updatedAt="2025-01-10T08:00:00")  # no offset
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.record == f"workflows[1] (id {bad['id']})"
    assert caught.value.field == "updatedAt"
    assert "timezone" in caught.value.message
    for table in ("accounts", "workspaces", "instances", "sync_jobs", "workflows"):
        assert await conn.fetchval(f"SELECT count(*) FROM {table} WHERE id = ANY($1)",
                                   [_uuid(x) for x in r.values()]) == 0  # fmt: skip


async def test_a_failed_reload_keeps_the_previous_records(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    await load_snapshot(conn, snap.document())
    before = await _rows(conn, r)
    r["ws"]["name"] = "Renamed"
    snap.workflow(r["inst"], nodes=[node(name="")])
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.field == "nodes[0].name"
    assert await _rows(conn, r) == before


@pytest.mark.parametrize(
    ("mutate", "record", "field", "words"),
    [
        (lambda s, r: s.instance(new_id()), "instances[1]", "workspaceId", "no workspace"),
        (lambda s, r: s.workflow(new_id()), "workflows[1]", "instanceId", "no instance"),
        (lambda s, r: s.sync_job(new_id()), "syncJobs[1]", "instanceId", "no instance"),
        (
            lambda s, r: s.workspace(members=[member(new_id())]),
            "workspaces[1]",
            "members[0].accountId",
            "no account",
        ),
        (lambda s, r: s.workspace(timeZone="Mars/Olympus"), "workspaces[1]", "timeZone", "IANA"),
        (lambda s, r: s.workspace(colour="red"), "workspaces[1]", "colour", "not a snapshot"),
        (lambda s, r: s.workspace(name=ABSENT), "workspaces[1]", "name", "required"),
        (lambda s, r: s.instance(r["ws"], status="paused"), "instances[1]", "status", "paused"),
        (
            lambda s, r: s.workflow(r["inst"], nodes=[node() for _ in range(1001)]),
            "workflows[1]",
            "nodes",
            "at most 1000",
        ),
        (
            lambda s, r: s.workflow(r["inst"], nodes=[node(typeVersion="2")]),
            "workflows[1]",
            "nodes[0].typeVersion",
            "expected",
        ),
        (
            lambda s, r: s.workflow(r["inst"], definitionAvailable=None),
            "workflows[1]",
            "definitionAvailable",
            "expected",
        ),
        (
            lambda s, r: s.workflow(r["inst"], id="11111111-1111-1111-1111-111111111111"),
            "workflows[1]",
            "id",
            "UUID",
        ),
        (lambda s, r: s.workflow(r["inst"], id=r["wf"]["id"]), "workflows[1]", "id", "duplicate"),
        (lambda s, r: s.account(email="a\x00b@example.test"), "accounts[1]", "email", "regex"),
        (
            lambda s, r: s.account(email=r["owner"]["email"].upper()),
            "accounts[1]",
            "email",
            "same email",
        ),
    ],
)
async def test_errors_name_the_record_and_field(
    conn: asyncpg.Connection, mutate: Any, record: str, field: str, words: str
) -> None:
    snap, r = small_snapshot()
    mutate(snap, r)
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, snap.document())
    assert caught.value.record.startswith(record), caught.value
    assert caught.value.field == field, caught.value
    assert words.lower() in caught.value.message.lower(), caught.value
    assert await conn.fetchval("SELECT count(*) FROM workspaces WHERE id = $1",
                               _uuid(r["ws"])) == 0  # fmt: skip


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        (b"{not json", "", "not valid JSON"),
        (b"[]", "", "one JSON object"),
        (b'{"workspaces": {}}', "workspaces", "array"),
        (b'{"tenants": []}', "tenants", "not a snapshot array"),
    ],
)
async def test_malformed_documents(
    conn: asyncpg.Connection, doc: bytes, field: str, words: str
) -> None:
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, doc)
    assert caught.value.record == "snapshot"
    assert caught.value.field == field
    assert words in caught.value.message


async def test_references_may_point_at_records_already_stored(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    await load_snapshot(conn, snap.document())
    later = Snapshot()
    wf = later.workflow(r["inst"])
    later.workspace(members=[member(r["owner"], "member")])
    report = await load_snapshot(conn, later.document())
    assert (report.workflows, report.memberships) == (1, 1)
    assert await conn.fetchval("SELECT workspace_id FROM workflows WHERE id = $1",
                               _uuid(wf)) == _uuid(r["ws"])  # fmt: skip


async def test_members_replace_memberships_and_absent_members_keep_them(
    conn: asyncpg.Connection,
) -> None:
    snap, r = small_snapshot()
    other = snap.account()
    await load_snapshot(conn, snap.document())
    r["ws"]["members"] = [member(other, "member")]
    await load_snapshot(conn, document(workspaces=[r["ws"]]))
    assert await _members(conn, r["ws"]) == {_uuid(other): "member"}
    r["ws"].pop("members")
    r["ws"]["readGeneration"] = 4
    await load_snapshot(conn, document(workspaces=[r["ws"]]))
    assert await _members(conn, r["ws"]) == {_uuid(other): "member"}
    r["ws"].pop("readGeneration")  # absent keeps the stored generation
    await load_snapshot(conn, document(workspaces=[r["ws"]]))
    generation = await conn.fetchval(
        "SELECT read_generation FROM workspaces WHERE id = $1", _uuid(r["ws"])
    )
    assert generation == 4


async def test_moving_an_instance_to_another_workspace_is_refused(
    conn: asyncpg.Connection,
) -> None:
    snap, r = small_snapshot()
    elsewhere = snap.workspace()
    await load_snapshot(conn, snap.document())
    r["inst"]["workspaceId"] = elsewhere["id"]
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, document(instances=[r["inst"]]))
    assert caught.value.field == "workspaceId"


async def test_node_inventory_keeps_the_longest_prefix_within_32_kib(
    conn: asyncpg.Connection,
) -> None:
    snap, r = small_snapshot()
    nodes = [node(name=f"n{i:04d}-" + "é" * 20, parameters={"secret": "x"}) for i in range(1000)]
    wf = snap.workflow(r["inst"], nodes=nodes)
    await load_snapshot(conn, snap.document())
    row = await conn.fetchrow("SELECT * FROM workflows WHERE id = $1", _uuid(wf))
    inventory = row["nodes_inventory"]
    kept = json.loads(inventory)
    assert row["node_count"] == 1000 and row["nodes_truncated"] is True
    assert 0 < len(kept) < 1000
    assert len(inventory.encode()) <= MAX_INVENTORY_BYTES
    one_more = json.dumps(kept + [_shape(nodes[len(kept)])], separators=(",", ":"),
                          ensure_ascii=False)  # fmt: skip
    assert len(one_more.encode()) > MAX_INVENTORY_BYTES
    assert [n["name"] for n in kept] == [n["name"] for n in nodes[: len(kept)]]
    assert "secret" not in inventory and "secret" not in json.dumps(row["nodes"])


async def test_overlong_node_strings_are_shortened_silently(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    wf = snap.workflow(r["inst"], nodes=[node(type="t" * 301, name="\U0001f600" * 1001)])
    await load_snapshot(conn, snap.document())
    stored = json.loads(
        await conn.fetchval("SELECT nodes_inventory FROM workflows WHERE id = $1", _uuid(wf))
    )
    assert stored[0]["type"] == "t" * 300 and stored[0]["name"] == "\U0001f600" * 1000


def _shape(n: dict[str, Any]) -> dict[str, Any]:
    return {k: n[k] for k in ("id", "name", "type", "typeVersion", "disabled")}


def _uuid(record: dict[str, Any] | str) -> Any:
    import uuid

    return uuid.UUID(record if isinstance(record, str) else record["id"])


async def _members(conn: asyncpg.Connection, ws: dict[str, Any]) -> dict[Any, str]:
    rows = await conn.fetch(
        "SELECT account_id, role FROM memberships WHERE workspace_id = $1", _uuid(ws)
    )
    return {row["account_id"]: row["role"] for row in rows}


async def _rows(conn: asyncpg.Connection, r: dict[str, Any]) -> list[Any]:
    ids = [_uuid(x) for x in r.values()]
    out = []
    for table in ("workspaces", "instances", "sync_jobs", "workflows", "memberships"):
        key = "workspace_id" if table == "memberships" else "id"
        rows = await conn.fetch(f"SELECT * FROM {table} WHERE {key} = ANY($1) ORDER BY 1", ids)
        out.append([dict(row) for row in rows])
    out.append(await conn.fetchval("SELECT name FROM accounts WHERE id = $1", _uuid(r["owner"])))
    return out


async def test_invalid_utf8_inside_a_record_names_the_record(conn: asyncpg.Connection) -> None:
    snap, r = small_snapshot()
    doc = snap.document().replace(b"Ops\\u0007team", b"Ops\xffteam")
    assert b"\xff" in doc
    with pytest.raises(LoadError) as caught:
        await load_snapshot(conn, doc)
    assert caught.value.record == "workspaces[0]"
    assert "UTF-8" in caught.value.message
