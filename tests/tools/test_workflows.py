"""get_many_workflows and get_workflow against real PostgreSQL, outputs schema-checked."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from service.errors import CursorStale, NotFound, ValidationError
from service.tools.cursors import CursorCodec
from tests.support.snapshots import Snapshot, document, new_id, node
from tests.tools.inventory_support import Client, client_for, codec_for, load

ASTRAL = "\U0001f600"
Row = dict[str, Any]


@pytest.fixture
def codec(signing_key_pem: bytes) -> CursorCodec:
    return codec_for(signing_key_pem)


def ids(rows: list[Row]) -> list[str]:
    return [r["id"] for r in rows]


def ordered(records: list[Row]) -> list[str]:
    """Expected order: stored (sanitised) name by code point, then the lowercase id."""
    return [r["id"] for r in sorted(records, key=lambda r: (r["name"], r["id"]))]


class Lifecycles:
    """One workspace, two instances, current and historical workflows of every kind."""

    def __init__(self) -> None:
        snap = self.snap = Snapshot()
        self.ws = snap.workspace()
        self.a = snap.instance(self.ws, name="A")
        self.b = snap.instance(self.ws, name="B", workflowInventoryTruncated=True)
        self.current = [
            snap.workflow(self.a, name="Z"),
            snap.workflow(self.a, name="a", archived=False, definitionAvailable=True),
            snap.workflow(self.b, name="a", archived=None),
            snap.workflow(self.b, name="é", observedAt="2024-12-01T00:00:00Z"),
            snap.workflow(self.a, name=ASTRAL),
        ]
        self.historical = [
            snap.workflow(self.a, name="absent", present=False),
            snap.workflow(self.b, name="archived", archived=True),
            snap.workflow(
                self.a,
                name="removed",
                definitionAvailable=False,
                definitionRemovedAt="2025-01-12T00:00:00+02:00",
            ),
        ]


@pytest.fixture
async def lifecycles(db_pool: asyncpg.Pool) -> Lifecycles:
    made = Lifecycles()
    await load(db_pool, made.snap)
    return made


async def test_lifecycle_filters_and_order(
    db_pool: asyncpg.Pool, codec: CursorCodec, lifecycles: Lifecycles
) -> None:
    lc = lifecycles
    client = client_for(db_pool, codec, lc.ws)
    ws = lc.ws["id"]
    default = await client.call("get_many_workflows", workspaceId=ws)
    assert ids(default["workflows"]) == ordered(lc.current)
    assert [w["name"] for w in default["workflows"]] == ["Z", "a", "a", "é", ASTRAL]
    historical = await client.call("get_many_workflows", workspaceId=ws, lifecycle="historical")
    assert ids(historical["workflows"]) == ordered(lc.historical)
    every = await client.call("get_many_workflows", workspaceId=ws, lifecycle="all")
    assert ids(every["workflows"]) == ordered(lc.current + lc.historical)
    only_b = await client.call("get_many_workflows", workspaceId=ws, instanceId=lc.b["id"].upper())
    assert ids(only_b["workflows"]) == ordered(
        [w for w in lc.current if w["instanceId"] == lc.b["id"]]
    )
    assert {w["instanceName"] for w in only_b["workflows"]} == {"B"}
    for page in (default, historical, every):
        assert page["nextCursor"] is None and page["workspaceId"] == ws


async def test_coverage_scope(
    db_pool: asyncpg.Pool, codec: CursorCodec, lifecycles: Lifecycles
) -> None:
    lc = lifecycles
    client = client_for(db_pool, codec, lc.ws)
    whole = (await client.call("get_many_workflows", workspaceId=lc.ws["id"]))["coverage"]
    assert whole == {
        "firstObservedAt": "2024-12-01T00:00:00Z",
        "lastSuccessfulSyncAt": "2025-01-15T09:30:00Z",
        "partial": True,
        "workflowsTruncated": True,
        "executionsTruncated": False,
    }
    only_a = await client.call("get_many_workflows", workspaceId=lc.ws["id"], instanceId=lc.a["id"])
    assert only_a["coverage"]["firstObservedAt"] == "2025-01-15T09:30:00Z"
    assert only_a["coverage"]["workflowsTruncated"] is False


async def test_optional_fields_absent_versus_null(
    db_pool: asyncpg.Pool, codec: CursorCodec, lifecycles: Lifecycles
) -> None:
    lc = lifecycles
    client = client_for(db_pool, codec, lc.ws)
    page = await client.call("get_many_workflows", workspaceId=lc.ws["id"], lifecycle="all")
    by_id = {w["id"]: w for w in page["workflows"]}
    plain = by_id[lc.current[0]["id"]]
    for key in ("archived", "definitionAvailable", "definitionRemovedAt", "costMedian",
                "missingMappingObservations"):  # fmt: skip
        assert key not in plain
    assert by_id[lc.current[1]["id"]]["archived"] is False
    assert by_id[lc.current[1]["id"]]["definitionAvailable"] is True
    assert by_id[lc.current[2]["id"]]["archived"] is None
    removed = by_id[lc.historical[2]["id"]]
    assert (removed["definitionAvailable"], removed["definitionRemovedAt"]) == (
        False,
        "2025-01-11T22:00:00Z",
    )
    snap = Snapshot()
    wf = snap.workflow(lc.a, definitionRemovedAt=None, updatedAt=None)
    await load(db_pool, snap)
    got = await client.call("get_workflow", workspaceId=lc.ws["id"], workflowId=wf["id"])
    assert got["workflow"]["definitionRemovedAt"] is None and got["workflow"]["updatedAt"] is None


async def test_names_are_sanitised_and_shortened(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws, name="i" * 201)
    long = snap.workflow(inst, name="b" * 199 + ASTRAL + "tail", sourceId="s\x85" * 150)
    exact = snap.workflow(inst, name="c" * 200)
    control = snap.workflow(inst, name="a\x00b\x1f\x7f\x9f")
    await load(db_pool, snap)
    page = await client_for(db_pool, codec, ws).call("get_many_workflows", workspaceId=ws["id"])
    first, second, third = page["workflows"]
    assert (first["id"], first["name"], first["nameTruncated"]) == (
        control["id"],
        "a\ufffdb\ufffd\ufffd\ufffd",
        False,
    )
    assert (second["id"], second["name"], second["nameTruncated"]) == (
        long["id"],
        "b" * 199 + ASTRAL,
        True,
    )
    assert second["sourceId"] == "s\ufffd" * 100 and second["instanceName"] == "i" * 200
    assert (third["id"], third["nameTruncated"]) == (exact["id"], False)


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
@pytest.mark.parametrize(("lifecycle", "by_instance"), [("all", False), ("current", True)])
async def test_cursor_walk_returns_every_row_once(
    db_pool: asyncpg.Pool,
    codec: CursorCodec,
    lifecycles: Lifecycles,
    limit: int,
    lifecycle: str,
    by_instance: bool,
) -> None:
    lc = lifecycles
    client = client_for(db_pool, codec, lc.ws)
    arguments: dict[str, Any] = {"workspaceId": lc.ws["id"], "lifecycle": lifecycle}
    if by_instance:
        arguments["instanceId"] = lc.a["id"]
    expected = (await client.call("get_many_workflows", **arguments))["workflows"]
    rows, pages = await client.walk("get_many_workflows", **arguments, limit=limit)
    assert rows == expected and len(set(ids(rows))) == len(rows)
    assert pages == max(1, -(-len(expected) // limit))


async def test_foreign_cursors_are_validation_errors(
    db_pool: asyncpg.Pool, codec: CursorCodec, lifecycles: Lifecycles
) -> None:
    lc = lifecycles
    client = client_for(db_pool, codec, lc.ws)
    ws = lc.ws["id"]
    base = {"workspaceId": ws, "lifecycle": "all", "limit": 2}
    cursor = (await client.call("get_many_workflows", **base))["nextCursor"]
    assert cursor is not None and len(cursor) <= 200
    spaces_cursor = None
    snap = Snapshot()
    snap.workspace()
    snap.workspace()
    await load(db_pool, snap)
    spaces = client_for(db_pool, codec, *snap.arrays["workspaces"])
    spaces = replace(spaces, account_id=client.account_id, approval_id=client.approval_id)
    spaces_cursor = (await spaces.call("get_many_workspaces", limit=1))["nextCursor"]
    flipped = cursor[:10] + ("A" if cursor[10] != "A" else "B") + cursor[11:]
    refused: list[tuple[Client, dict[str, Any]]] = [
        (client, {**base, "cursor": flipped}),
        (client, {**base, "cursor": cursor, "limit": 3}),
        (client, {**base, "cursor": cursor, "lifecycle": "current"}),
        (client, {**base, "cursor": cursor, "instanceId": lc.a["id"]}),
        (client, {**base, "cursor": spaces_cursor}),
        (replace(client, account_id=UUID(new_id())), {**base, "cursor": cursor}),
        (replace(client, generation=2), {**base, "cursor": cursor}),
        (replace(client, workspaces={**client.workspaces, UUID(new_id()): "member"}),
         {**base, "cursor": cursor}),
    ]  # fmt: skip
    for who, arguments in refused:
        with pytest.raises(ValidationError):
            await who.call("get_many_workflows", **arguments)
    # Errors come in order: a bad cursor before NOT_FOUND.
    with pytest.raises(ValidationError):
        await client.call(
            "get_many_workflows", **{**base, "cursor": flipped, "instanceId": new_id()}
        )
    # The genuine cursor still works.
    assert (await client.call("get_many_workflows", **base, cursor=cursor))["workflows"]


async def test_stale_cursors(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    lc = Lifecycles()
    await load(db_pool, lc.snap)
    client = client_for(db_pool, codec, lc.ws)
    base = {"workspaceId": lc.ws["id"], "limit": 1}
    cursor = (await client.call("get_many_workflows", **base))["nextCursor"]
    lc.ws["readGeneration"] = 2
    await load(db_pool, document(workspaces=[lc.ws]))
    with pytest.raises(CursorStale) as caught:
        await client.call("get_many_workflows", **base, cursor=cursor)
    assert caught.value.text == "MCP_CURSOR_STALE: Read settings changed. Restart without a cursor."

    cursor = (await client.call("get_many_workflows", **base))["nextCursor"]
    anchor = next(w for w in lc.current if w["name"] == "Z")
    anchor["name"] = "Zz"  # the anchor row is renamed: the keyset position is gone
    await load(db_pool, document(workflows=[anchor]))
    with pytest.raises(CursorStale):
        await client.call("get_many_workflows", **base, cursor=cursor)


async def test_not_found(db_pool: asyncpg.Pool, codec: CursorCodec, lifecycles: Lifecycles) -> None:
    lc = lifecycles
    other = Lifecycles()
    await load(db_pool, other.snap)
    client = client_for(db_pool, codec, lc.ws, other.ws)
    ws = lc.ws["id"]
    for instance_id in (other.a["id"], new_id()):
        with pytest.raises(NotFound):
            await client.call("get_many_workflows", workspaceId=ws, instanceId=instance_id)
    for workflow_id in (other.current[0]["id"], new_id()):
        with pytest.raises(NotFound):
            await client.call("get_workflow", workspaceId=ws, workflowId=workflow_id)
    with pytest.raises(NotFound):
        await client_for(db_pool, codec, lc.ws).call(
            "get_workflow", workspaceId=other.ws["id"], workflowId=other.current[0]["id"]
        )
    with pytest.raises(ValidationError):
        await client.call("get_many_workflows", workspaceId=ws, lifecycle="archived")


def worst_case(snap: Snapshot, count: int) -> tuple[Row, list[Row]]:
    """Rows as large as the output allows: 4-byte characters (8 bytes a code point across
    the result and its text copy; a quote or backslash costs 6), and a few quotes and
    backslashes that the text copy escapes a second time."""
    ws = snap.workspace()
    inst = snap.instance(ws, name=ASTRAL * 200)
    made = [
        snap.workflow(
            inst,
            name=f"{n:03d}" + '"\\' * 5 + ASTRAL * 187 + "overflow",
            sourceId='"' * 10 + ASTRAL * 190,
            archived=None,
            definitionAvailable=True,
            definitionRemovedAt="2025-01-12T00:00:00.123456Z",
        )
        for n in range(count)
    ]
    return ws, made


async def test_pages_stay_within_256_kib(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws, made = worst_case(snap, 50)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)
    first = await client.call("get_many_workflows", workspaceId=ws["id"])
    assert 0 < len(first["workflows"]) < 50 and first["nextCursor"] is not None
    rows, pages = await client.walk("get_many_workflows", workspaceId=ws["id"])
    assert ids(rows) == [w["id"] for w in made] and pages == 2


async def test_pages_with_a_small_response_bound(db_pool: asyncpg.Pool, codec: CursorCodec) -> None:
    snap = Snapshot()
    ws, made = worst_case(snap, 9)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)
    client.max_response_bytes = 12_000
    rows, pages = await client.walk("get_many_workflows", workspaceId=ws["id"], limit=7)
    assert ids(rows) == [w["id"] for w in made] and pages > 2


async def test_get_workflow_with_a_1000_node_inventory_past_32_kib(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws, name="Production n8n")
    nodes = [node(name=f"Node {i}", type="n8n-nodes-base.httpRequest", typeVersion=4)
             for i in range(1000)]  # fmt: skip
    nodes[0].update(typeVersion=None, disabled=True, name="Ünïcödé " + ASTRAL)
    nodes[1].update(typeVersion=2.2)
    big = snap.workflow(inst, nodes=nodes)
    small = snap.workflow(inst, nodes=[], archived=True)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)

    got = await client.call("get_workflow", workspaceId=ws["id"].upper(), workflowId=big["id"])
    wf = got["workflow"]
    assert (wf["nodeCount"], wf["nodesTruncated"]) == (1000, True)
    kept = wf["nodes"]
    assert 0 < len(kept) < 1000
    assert kept == [{k: n[k] for k in ("id", "name", "type", "typeVersion", "disabled")}
                    for n in nodes[: len(kept)]]  # fmt: skip
    assert len(json.dumps(kept, separators=(",", ":"), ensure_ascii=False).encode()) <= 32 * 1024
    assert kept[0]["typeVersion"] is None and kept[2]["typeVersion"] == 4
    assert got["coverage"]["partial"] is True and got["workspaceId"] == ws["id"]
    assert (wf["id"], wf["instanceName"]) == (big["id"], "Production n8n")

    empty = await client.call("get_workflow", workspaceId=ws["id"], workflowId=small["id"])
    assert (empty["workflow"]["nodes"], empty["workflow"]["nodesTruncated"]) == ([], False)
    assert empty["workflow"]["nodeCount"] == 0 and empty["workflow"]["archived"] is True


async def test_cost_median_and_missing_mappings_from_retained_executions(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    priced = snap.workflow(inst, name="priced")
    quiet = snap.workflow(inst, name="quiet")
    coverage = {"state": "complete", "pricedComponents": 1, "unresolvedComponents": 0,
                "excludedComponents": 0, "observations": 1}  # fmt: skip
    snap.execution(inst, priced, cost={"amount": "1.5"}, costCoverage=coverage)
    snap.execution(inst, priced, cost={"amount": "2.50"},
                   costCoverage={**coverage, "missingMappingObservations": 3})  # fmt: skip
    snap.execution(inst, priced, cost=None)
    await load(db_pool, snap)
    client = client_for(db_pool, codec, ws)
    page = await client.call("get_many_workflows", workspaceId=ws["id"])
    first, second = page["workflows"]
    assert first["costMedian"] == {
        "cost": {"amount": "2", "currency": "USD", "kind": "estimated", "basis": "openrouter"},
        "pricedExecutions": 2,
        "totalExecutions": 3,
        "partial": True,
    }
    assert first["missingMappingObservations"] == 3
    assert "costMedian" not in second and "missingMappingObservations" not in second
    detail = await client.call("get_workflow", workspaceId=ws["id"], workflowId=priced["id"])
    assert detail["workflow"]["costMedian"] == first["costMedian"]
    assert quiet["id"] == second["id"]


async def test_reloading_without_an_optional_field_makes_it_absent(
    db_pool: asyncpg.Pool, codec: CursorCodec
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    wf = snap.workflow(snap.instance(ws), archived=True)
    await load(db_pool, snap)
    wf.pop("archived")
    await load(db_pool, document(workflows=[wf]))
    got = await client_for(db_pool, codec, ws).call(
        "get_workflow", workspaceId=ws["id"], workflowId=wf["id"]
    )
    assert "archived" not in got["workflow"]
