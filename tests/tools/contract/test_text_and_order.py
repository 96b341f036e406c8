"""docs/reading-rules.md, as a user reads them through /mcp: control characters replaced at
load, shortening in code points with its flags, code-point order with the lowercase-id
tie-break, the execution order, lifecycle, and the bounded node inventory."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from service.errors import LoadError
from tests.support.snapshots import Snapshot, node
from tests.tools.contract.conftest import AuditFactory

R = "\ufffd"
# C0, DEL and C1 samples, and characters that must survive (NBSP follows C1).
DIRTY = "a\x00b\x01c\x1fd\x7fe\x80f\x85g\x9fh\xa0i"
CLEAN_C0_C1 = f"a{R}b{R}c{R}d{R}e{R}f{R}g{R}h\xa0i"


async def test_names_with_patterns_replace_c0_del_c1_everywhere(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace(name="W" + DIRTY)
    inst = snap.instance(ws, name="I" + DIRTY)
    wf = snap.workflow(
        inst,
        name="F" + DIRTY,
        sourceId="S" + DIRTY,
        nodes=[node(id="N" + DIRTY, name="n" + DIRTY, type="t" + DIRTY)],
    )
    ex = snap.execution(
        inst, wf, workflowName="L" + DIRTY, sourceId="X" + DIRTY, sourceWorkflowId="Y" + DIRTY
    )
    a = await audit(snap)
    wid = ws["id"]
    assert (await a.ok("get_workspace", {"workspaceId": wid}))["workspace"][
        "name"
    ] == "W" + CLEAN_C0_C1
    listed = await a.ok("get_many_workspaces", {})
    assert [w["name"] for w in listed["workspaces"]] == ["W" + CLEAN_C0_C1]
    inst_out = (await a.ok("get_many_instances", {"workspaceId": wid}))["instances"][0]
    assert inst_out["name"] == "I" + CLEAN_C0_C1
    wf_out = (await a.ok("get_workflow", {"workspaceId": wid, "workflowId": wf["id"]}))["workflow"]
    assert (wf_out["name"], wf_out["sourceId"], wf_out["instanceName"]) == (
        "F" + CLEAN_C0_C1,
        "S" + CLEAN_C0_C1,
        "I" + CLEAN_C0_C1,
    )
    assert wf_out["nodes"][0] | {"typeVersion": None, "disabled": False} == {
        "id": "N" + CLEAN_C0_C1, "name": "n" + CLEAN_C0_C1, "type": "t" + CLEAN_C0_C1,
        "typeVersion": None, "disabled": False,
    }  # fmt: skip
    row = (await a.ok("get_execution", {"workspaceId": wid, "executionId": ex["id"]}))["execution"]
    assert (row["workflowName"], row["sourceId"], row["sourceWorkflowId"]) == (
        "L" + CLEAN_C0_C1,
        "X" + CLEAN_C0_C1,
        "Y" + CLEAN_C0_C1,
    )


def _history(**over: Any) -> dict[str, Any]:
    run = {
        "id": "r" + DIRTY, "status": "error", "startedAt": "2025-01-15T09:00:00Z",
        "durationMs": 5, "pinned": False,
        "error": {"name": "E" + DIRTY, "message": "m" + DIRTY}, "usage": [],
    }  # fmt: skip
    history = {
        "schemaVersion": 1, "availability": "available", "reason": None,
        "observedAt": "2025-01-15T09:35:00Z", "order": "recorded", "workflowVersionId": None,
        "pinnedData": None,
        "pinning": {"status": "not_used", "source": "none", "pinnedNodeIds": []},
        "failure": None,
        "nodes": [{"id": "n" + DIRTY, "name": "N" + DIRTY, "type": "T" + DIRTY,
                   "provenance": "recorded_run", "pinned": False, "runs": [run]}],
    }  # fmt: skip
    history.update(over)
    return history


async def test_history_ids_replace_c0_del_and_free_text_only_nul(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    ex = snap.execution(inst, history=_history())
    a = await audit(snap)
    out = await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": ex["id"]})
    node_out = out["history"]["nodes"][0]
    c0_del = f"a{R}b{R}c{R}d{R}e\x80f\x85g\x9fh\xa0i"
    nul_only = f"a{R}b\x01c\x1fd\x7fe\x80f\x85g\x9fh\xa0i"
    assert node_out["id"] == "n" + c0_del
    assert node_out["runs"][0]["id"] == "r" + c0_del
    assert node_out["name"] == "N" + nul_only
    assert node_out["type"] == "T" + nul_only
    assert node_out["runs"][0]["error"]["message"] == "m" + nul_only
    assert out["history"]["truncated"] is False


ASTRAL = "\U0001f600"  # one code point, two UTF-16 units, four UTF-8 bytes


async def test_shortening_counts_code_points_with_flags(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace(name=ASTRAL * 250)
    inst = snap.instance(ws, name="i" * 199 + ASTRAL * 2)
    exact_wf = snap.workflow(inst, name=ASTRAL * 200)
    long_wf = snap.workflow(inst, name=ASTRAL * 201)
    exact_ex = snap.execution(inst, workflowName=ASTRAL * 100)
    long_ex = snap.execution(inst, workflowName=ASTRAL * 101)
    a = await audit(snap)
    wid = ws["id"]
    assert (await a.ok("get_workspace", {"workspaceId": wid}))["workspace"]["name"] == ASTRAL * 200
    inst_name = (await a.ok("get_many_instances", {"workspaceId": wid}))["instances"][0]["name"]
    assert inst_name == "i" * 199 + ASTRAL
    for wf, name, flag in ((exact_wf, ASTRAL * 200, False), (long_wf, ASTRAL * 200, True)):
        got = (await a.ok("get_workflow", {"workspaceId": wid, "workflowId": wf["id"]}))["workflow"]
        assert (got["name"], got["nameTruncated"], got["instanceName"]) == (name, flag, inst_name)
    rows = {
        r["id"]: r for r in (await a.ok("get_many_workflows", {"workspaceId": wid}))["workflows"]
    }
    assert rows[long_wf["id"]]["nameTruncated"] is True
    assert rows[exact_wf["id"]]["nameTruncated"] is False
    for ex, flag in ((exact_ex, False), (long_ex, True)):
        got = await a.ok("get_execution", {"workspaceId": wid, "executionId": ex["id"]})
        row = got["execution"]
        assert (row["workflowName"], row["workflowNameTruncated"]) == (ASTRAL * 100, flag)
        assert row["instanceName"] == inst_name


def _ids_sorted(ids: list[str]) -> list[str]:
    return sorted(i.lower() for i in ids)


async def test_names_sort_by_code_point_then_lowercase_id(audit: AuditFactory) -> None:
    # UTF-16 order would put the astral name before U+FB00; code-point order puts it last.
    names = ["\ufb00", ASTRAL, "Z", "a", "\xc9", "a"]
    snap = Snapshot()
    wss = [snap.workspace(name=n) for n in names]
    # Two names that differ only in control characters are equal once sanitised.
    tie = [snap.workspace(name="b\x01"), snap.workspace(name="b\x7f"), snap.workspace(name="b" + R)]
    a = await audit(snap)
    got = await a.pages("get_many_workspaces", {"limit": 2}, "workspaces")
    by_id = {w["id"]: w for w in [*wss, *tie]}
    expected = sorted(
        by_id, key=lambda i: (by_id[i]["name"].replace("\x01", R).replace("\x7f", R), i)
    )
    assert [w["id"] for w in got] == expected

    snap2 = Snapshot()
    ws = snap2.workspace()
    insts = [snap2.instance(ws, name=n) for n in [*names, "b\x01", "b" + R]]
    wfs = [snap2.workflow(insts[0], name=n) for n in [*names, "b\x85", "b" + R]]
    a2 = await audit(snap2)
    got_i = (await a2.ok("get_many_instances", {"workspaceId": ws["id"]}))["instances"]

    def clean(s: str) -> str:
        return s.replace("\x01", R).replace("\x85", R)

    assert [i["id"] for i in got_i] == sorted(
        (i["id"] for i in insts),
        key=lambda i: (clean(next(x["name"] for x in insts if x["id"] == i)), i),
    )
    got_w = await a2.pages("get_many_workflows", {"workspaceId": ws["id"], "limit": 3}, "workflows")
    assert [w["id"] for w in got_w] == sorted(
        (w["id"] for w in wfs),
        key=lambda i: (clean(next(x["name"] for x in wfs if x["id"] == i)), i),
    )


async def test_uuids_any_case_in_lowercase_out(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace(id=str(uuid.uuid4()).upper())
    inst = snap.instance(ws["id"], id=str(uuid.uuid4()).upper())
    wf = snap.workflow(inst["id"], id=str(uuid.uuid4()).upper())
    ex = snap.execution(inst["id"], wf["id"], id=str(uuid.uuid4()).upper())
    a = await audit(snap)
    wid = ws["id"]
    for arg in (wid, wid.lower()):
        out = await a.ok("get_workspace", {"workspaceId": arg})
        assert out["workspace"]["id"] == wid.lower()
    got = await a.ok("get_execution", {"workspaceId": wid, "executionId": ex["id"]})
    assert got["workspaceId"] == wid.lower()
    assert got["execution"]["id"] == ex["id"].lower()
    assert got["execution"]["instanceId"] == inst["id"].lower()
    assert got["execution"]["workflowId"] == wf["id"].lower()
    wf_out = await a.ok("get_workflow", {"workspaceId": wid, "workflowId": wf["id"]})
    assert (wf_out["workspaceId"], wf_out["workflow"]["id"]) == (wid.lower(), wf["id"].lower())
    lst = await a.ok(
        "get_many_executions",
        {"workspaceId": wid, "instanceId": inst["id"], "workflowId": wf["id"]},
    )
    assert [r["id"] for r in lst["executions"]] == [ex["id"].lower()]


async def test_executions_order_by_coalesced_time_then_id(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    t1, t2, t3 = "2025-01-15T10:00:00Z", "2025-01-15T11:00:00+01:00", "2025-01-15T12:00:00Z"
    rows = [
        snap.execution(inst, startedAt=t1, createdAt=t3, observedAt=t3),  # time t1
        snap.execution(inst, startedAt=None, createdAt=t3, observedAt=t1),  # t3
        snap.execution(inst, startedAt=None, createdAt=None, observedAt=t2),  # t2 == t1 instant
        snap.execution(inst, startedAt=t2, createdAt=None),  # t1
        snap.execution(inst, startedAt="2025-01-15T09:59:59.999Z"),
        snap.execution(inst, startedAt=t3),
    ]
    a = await audit(snap)
    got = await a.pages("get_many_executions", {"workspaceId": ws["id"], "limit": 2}, "executions")
    ten, twelve = 0, 1
    key = {rows[0]["id"]: ten, rows[1]["id"]: twelve, rows[2]["id"]: ten, rows[3]["id"]: ten,
           rows[4]["id"]: -1, rows[5]["id"]: twelve}  # fmt: skip
    expected = sorted(key, key=lambda i: (key[i], i), reverse=True)
    assert [r["id"] for r in got] == expected


async def test_lifecycle_current_and_historical(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    current = [
        snap.workflow(inst, name="c1"),
        snap.workflow(inst, name="c2", archived=None),
        snap.workflow(inst, name="c3", archived=False, definitionAvailable=True),
    ]
    historical = [
        snap.workflow(inst, name="h1", present=False),
        snap.workflow(inst, name="h2", archived=True),
        snap.workflow(inst, name="h3", definitionAvailable=False),
    ]
    a = await audit(snap)
    wid = ws["id"]

    def ids(page: dict[str, Any]) -> list[str]:
        return [w["id"] for w in page["workflows"]]

    assert ids(await a.ok("get_many_workflows", {"workspaceId": wid})) == [w["id"] for w in current]
    assert ids(
        await a.ok("get_many_workflows", {"workspaceId": wid, "lifecycle": "historical"})
    ) == [w["id"] for w in historical]
    assert len(ids(await a.ok("get_many_workflows", {"workspaceId": wid, "lifecycle": "all"}))) == 6
    inst_out = (await a.ok("get_many_instances", {"workspaceId": wid}))["instances"][0]
    assert inst_out["workflowCount"] == 3
    # Absent and null stay distinct.
    rows = {
        w["name"]: w
        for w in (await a.ok("get_many_workflows", {"workspaceId": wid, "lifecycle": "all"}))[
            "workflows"
        ]
    }
    assert "archived" not in rows["c1"] and rows["c2"]["archived"] is None
    assert "definitionAvailable" not in rows["c1"] and rows["h3"]["definitionAvailable"] is False


def _compact(nodes: list[dict[str, Any]]) -> int:
    return len(json.dumps(nodes, ensure_ascii=False, separators=(",", ":")).encode())


async def test_node_inventory_is_the_longest_prefix_within_1000_nodes_and_32_kib(
    audit: AuditFactory,
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    # Non-ASCII names: escaped they would be 6 bytes a character, UTF-8 2.
    big = [node(name="é" * 150 + str(i), typeVersion=None) for i in range(300)]
    wf_big = snap.workflow(inst, nodes=big)
    small = [node(id=str(i), name=str(i), type="x", typeVersion=None) for i in range(1000)]
    wf_small = snap.workflow(inst, nodes=small)
    a = await audit(snap)
    for wf, nodes in ((wf_big, big), (wf_small, small)):
        got = await a.ok("get_workflow", {"workspaceId": ws["id"], "workflowId": wf["id"]})
        out = got["workflow"]
        shown = [
            {k: n[k] for k in ("id", "name", "type", "typeVersion", "disabled")} for n in nodes
        ]
        k = max(i for i in range(len(shown) + 1) if _compact(shown[:i]) <= 32 * 1024)
        assert k < len(nodes)  # even 1000 minimal nodes exceed 32 KiB
        assert out["nodes"] == shown[:k]
        assert (out["nodesTruncated"], out["nodeCount"]) == (True, len(nodes))


async def test_a_workflow_of_1001_nodes_is_refused_at_load(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    snap.workflow(inst, nodes=[node(id=str(i)) for i in range(1001)])
    with pytest.raises(LoadError) as err:
        await audit(snap)
    assert "nodes" in str(err.value)
