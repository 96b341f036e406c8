"""docs/tools.md and docs/reading-rules.md through /mcp: tool errors, NOT_FOUND that cannot tell
another workspace's record from none, cursors (every row once, nextCursor exactly when more rows
exist, bound to tool, filters, limit and approval, stale on a new read generation, byte-exact),
integer arguments, error precedence and the first 20 instances."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest

from service.app_keys import DB_POOL, TOKENS
from service.store.load_snapshot import load_snapshot
from tests.support.approvals import Member, granted
from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import Audit, AuditFactory

STALE = "MCP_CURSOR_STALE: Read settings changed. Restart without a cursor."


def _two_workspaces() -> tuple[Snapshot, dict[str, Any]]:
    snap = Snapshot()
    mine, granted_other, foreign = snap.workspace(), snap.workspace(), snap.workspace()
    w: dict[str, Any] = {"mine": mine, "other": granted_other, "foreign": foreign}
    for key, ws in w.copy().items():
        inst = snap.instance(ws)
        wf = snap.workflow(inst)
        w[key + "_inst"] = inst
        w[key + "_wf"] = wf
        w[key + "_ex"] = snap.execution(inst, wf)
        w[key + "_job"] = snap.sync_job(inst)
    return snap, w


async def test_not_found_cannot_tell_foreign_records_from_missing(audit: AuditFactory) -> None:
    snap, w = _two_workspaces()
    a = await audit(snap, workspaces=[w["mine"]["id"], w["other"]["id"]])
    mine = w["mine"]["id"]
    missing = str(uuid.uuid4())
    cases = {
        "get_execution": ("executionId", "ex"),
        "get_workflow": ("workflowId", "wf"),
    }
    for tool, (arg, kind) in cases.items():
        answers = []
        for record in (missing, w[f"other_{kind}"]["id"], w[f"foreign_{kind}"]["id"]):
            answers.append(await a.error(tool, {"workspaceId": mine, arg: record}))
        assert answers[0]["code"] == "NOT_FOUND"
        assert answers[1] == answers[0] == answers[2], tool
    # A workspace not granted, one that does not exist: the same answer for every tool.
    for tool, extra in (
        ("get_workspace", {}),
        ("get_many_instances", {}),
        ("get_many_executions", {}),
        ("get_many_workflows", {}),
        ("get_execution_stats", {"period": "7d", "timeZone": "UTC"}),
        ("get_execution", {"executionId": w["foreign_ex"]["id"]}),
    ):
        x = await a.error(tool, {"workspaceId": w["foreign"]["id"], **extra})
        y = await a.error(tool, {"workspaceId": missing, **extra})
        assert x == y and x["code"] == "NOT_FOUND" and x["retryable"] is False, tool
    # Filters naming another workspace's instance or workflow: as if they did not exist.
    for tool, arg, kind in (
        ("get_many_executions", "instanceId", "inst"),
        ("get_many_executions", "workflowId", "wf"),
        ("get_many_workflows", "instanceId", "inst"),
    ):
        x = await a.result(tool, {"workspaceId": mine, arg: w[f"other_{kind}"]["id"]})
        y = await a.result(tool, {"workspaceId": mine, arg: missing})
        for r in (x, y):
            r.pop("structuredContent", None)
            r["content"] = [] if not r["isError"] else r["content"]
        assert x == y, tool
    x = await a.error(
        "get_many_sync_jobs", {"workspaceId": mine, "instanceId": w["other_inst"]["id"]}
    )
    y = await a.error("get_many_sync_jobs", {"workspaceId": mine, "instanceId": missing})
    assert x == y and x["code"] == "NOT_FOUND"


async def _another_approval(
    a: Audit, ws: dict[str, Any], scopes: str = "workspaces:read n8n:read"
) -> Audit:
    pool, tokens = a.client.app[DB_POOL], a.client.app[TOKENS]
    owner_id = next(m["accountId"] for m in ws["members"])
    who = Member(uuid.UUID(owner_id), "x", [uuid.UUID(ws["id"])], uuid.uuid4())
    _, issued = await granted(pool, tokens, who, scopes=scopes)
    return Audit(a.client, issued.access_token)


async def _reload(a: Audit, snap: Snapshot) -> None:
    async with a.client.app[DB_POOL].acquire() as conn:
        await load_snapshot(conn, snap.document())


@pytest.mark.parametrize(
    ("tool", "key"), [("get_many_executions", "executions"), ("get_many_workflows", "workflows")]
)
async def test_a_new_read_generation_makes_cursors_stale(
    audit: AuditFactory, tool: str, key: str
) -> None:
    snap = Snapshot()
    ws = snap.workspace(readGeneration=1)
    inst = snap.instance(ws)
    for _ in range(3):
        snap.workflow(inst)
        snap.execution(inst)
    a = await audit(snap)
    page = await a.ok(tool, {"workspaceId": ws["id"], "limit": 1})
    ws["readGeneration"] = 2
    await _reload(a, snap)
    result = await a.result(
        tool, {"workspaceId": ws["id"], "limit": 1, "cursor": page["nextCursor"]}
    )
    assert result["isError"] is True
    assert result["content"][0]["text"] == STALE
    assert result["_meta"]["code"] == "MCP_CURSOR_STALE"
    assert await a.ok(tool, {"workspaceId": ws["id"], "limit": 1})


async def test_every_row_once_and_no_cursor_to_an_empty_page(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    executions = [snap.execution(inst, startedAt="2025-01-15T09:00:00Z") for _ in range(20)]
    executions += [snap.execution(inst, startedAt=None, createdAt=None) for _ in range(3)]
    workflows = [snap.workflow(inst, name="same") for _ in range(12)]
    a = await audit(snap)
    for limit in (1, 4, 5, 23, 50):
        rows = await a.pages(
            "get_many_executions", {"workspaceId": ws["id"], "limit": limit}, "executions"
        )
        assert sorted(r["id"] for r in rows) == sorted(e["id"] for e in executions)
        assert len(rows) == 23
    for limit in (3, 4, 12):
        rows = await a.pages(
            "get_many_workflows", {"workspaceId": ws["id"], "limit": limit}, "workflows"
        )
        assert [r["id"] for r in rows] == sorted(w["id"] for w in workflows)
    # Exactly `limit` rows left: no nextCursor.
    last = await a.ok("get_many_workflows", {"workspaceId": ws["id"], "limit": 12})
    assert last["nextCursor"] is None


async def test_workspace_list_pages_and_cursor_length(audit: AuditFactory) -> None:
    snap = Snapshot()
    wss = [snap.workspace(name="w" * 200) for _ in range(50)]
    a = await audit(snap)
    page = await a.ok("get_many_workspaces", {"limit": 1})
    assert page["nextCursor"] is not None and len(page["nextCursor"]) <= 1024
    rows = await a.pages("get_many_workspaces", {"limit": 7}, "workspaces")
    assert [r["id"] for r in rows] == sorted(w["id"] for w in wss)


async def test_cursor_bound_to_tool_filters_limit_and_approval(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for _ in range(4):
        snap.execution(inst, status="error")
        snap.workflow(inst)
    a = await audit(snap)
    wid = ws["id"]
    base = {"workspaceId": wid, "limit": 2, "status": "failed"}
    cursor = (await a.ok("get_many_executions", base))["nextCursor"]
    assert (await a.ok("get_many_executions", {**base, "cursor": cursor}))["executions"]
    wrong = [
        ("get_many_executions", {**base, "limit": 3}),
        ("get_many_executions", {**base, "status": "error"}),
        ("get_many_executions", {**base, "instanceId": inst["id"]}),
        ("get_many_executions", {**base, "period": "30d"}),
        ("get_many_executions", {**base, "timeZone": "Asia/Tokyo"}),
        ("get_many_workflows", {"workspaceId": wid, "limit": 2}),
    ]
    for tool, args in wrong:
        err = await a.error(tool, {**args, "cursor": cursor})
        assert err["code"] == "VALIDATION_ERROR", (tool, args)
    # The same account through another approval.
    b = await _another_approval(a, ws)
    assert (await b.error("get_many_executions", {**base, "cursor": cursor}))[
        "code"
    ] == "VALIDATION_ERROR"


def _variants(cursor: str) -> list[str]:
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
    out = [
        cursor + "=" * (-len(cursor) % 4 or 4),  # padded
        base64.b64encode(raw).decode().rstrip("="),  # standard alphabet (when it differs)
        cursor[:-1] + ("A" if cursor[-1] != "A" else "B"),  # tampered
        cursor + "A",
        " " + cursor,
        cursor[:-1],
    ]
    # Non-canonical: same bytes, different unused trailing bits.
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    rem = len(raw) % 3
    if rem:
        spare = {1: 4, 2: 2}[rem]
        last = alphabet.index(cursor[-1])
        out.append(
            cursor[:-1] + alphabet[last | ((1 << spare) - 1)]
            if last & ((1 << spare) - 1) == 0
            else cursor[:-1] + alphabet[last & ~((1 << spare) - 1)]
        )
    return [v for v in out if v != cursor]


async def test_only_byte_exact_cursors_are_accepted(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for _ in range(3):
        snap.execution(inst)
    a = await audit(snap)
    args = {"workspaceId": ws["id"], "limit": 1}
    ws_cursor = (await a.ok("get_many_workspaces", {"limit": 1}))["nextCursor"]
    assert ws_cursor is None  # one workspace
    for _ in range(4):  # several nonces: different trailing-bit situations
        cursor = (await a.ok("get_many_executions", args))["nextCursor"]
        for variant in _variants(cursor):
            err = await a.error("get_many_executions", {**args, "cursor": variant})
            assert err["code"] == "VALIDATION_ERROR", variant


LIMITS = [
    (5.0, True), (1, True), (50.0, True), (5.5, False), ("5", False), (True, False), (0, False),
    (51, False), (None, False), (1e300, False), (-0.0, False),
]  # fmt: skip


@pytest.mark.parametrize(("limit", "ok"), LIMITS)
async def test_integer_arguments(audit: AuditFactory, limit: Any, ok: bool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for _ in range(6):
        snap.execution(inst)
    a = await audit(snap)
    args = {"workspaceId": ws["id"], "limit": limit}
    if ok:
        out = await a.ok("get_many_executions", args)
        assert len(out["executions"]) == min(6, int(limit))
        assert (await a.ok("get_many_workspaces", {"limit": limit}))["workspaces"]
        assert "jobs" in await a.ok("get_many_sync_jobs", {**args, "instanceId": inst["id"]})
    else:
        assert (await a.error("get_many_executions", args))["code"] == "VALIDATION_ERROR"
        assert (await a.error("get_many_workspaces", {"limit": limit}))[
            "code"
        ] == "VALIDATION_ERROR"


async def test_error_precedence(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for _ in range(3):
        snap.execution(inst)
    a = await audit(snap)
    wid = ws["id"]
    ungranted = str(uuid.uuid4())
    cursor = (await a.ok("get_many_executions", {"workspaceId": wid, "limit": 1}))["nextCursor"]
    bad_cursor = cursor[:-2] + "AA"
    # Arguments before zone before cursor before NOT_FOUND.
    err = await a.error(
        "get_many_executions",
        {"workspaceId": ungranted, "limit": 99, "timeZone": "Nowhere/X", "cursor": bad_cursor},
    )
    assert err["code"] == "VALIDATION_ERROR" and "limit" in err["message"]
    err = await a.error(
        "get_many_executions",
        {"workspaceId": ungranted, "timeZone": "Nowhere/X", "cursor": bad_cursor},
    )
    assert err["code"] == "VALIDATION_ERROR" and "timeZone" in err["message"]
    err = await a.error("get_many_executions", {"workspaceId": ungranted, "cursor": bad_cursor})
    assert err["code"] == "VALIDATION_ERROR" and "cursor" in err["message"]
    err = await a.error(
        "get_execution_stats", {"workspaceId": ungranted, "period": "7d", "timeZone": "Nowhere/X"}
    )
    assert err["code"] == "VALIDATION_ERROR" and "timeZone" in err["message"]
    err = await a.error(
        "get_execution_stats", {"workspaceId": ungranted, "period": "week", "timeZone": "Nowhere/X"}
    )
    assert err["code"] == "VALIDATION_ERROR" and "period" in err["message"]
    # A stale cursor for a workspace that is no longer granted is still a cursor problem
    # (the cursor binds the eligible set), reported before NOT_FOUND.
    err = await a.error("get_many_workflows", {"workspaceId": ungranted, "cursor": bad_cursor})
    assert err["code"] == "VALIDATION_ERROR"
    # Missing scope before anything else.
    b = await _another_approval(a, ws, scopes="workspaces:read")
    status, body = await b.raw("get_many_executions", {"workspaceId": "nope", "limit": 99})
    assert status == 403 and body["error"]["code"] == 403


async def test_first_20_instances_in_order(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    insts = [snap.instance(ws, name=f"inst {i:02d}") for i in range(25, 0, -1)]
    a = await audit(snap)
    got = (await a.ok("get_many_instances", {"workspaceId": ws["id"]}))["instances"]
    assert [i["name"] for i in got] == [f"inst {i:02d}" for i in range(1, 21)]
    assert {i["id"] for i in got} <= {i["id"] for i in insts}


WINDOWS = [(120, 50, True), (100, 50, True), (50, 50, False), (51, 50, True), (3, 2, True),
           (100, 100, None)]  # fmt: skip


@pytest.mark.parametrize(("jobs", "limit", "truncated"), WINDOWS)
async def test_sync_job_window(
    audit: AuditFactory, jobs: int, limit: int, truncated: bool | None
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    made = [
        snap.sync_job(inst, createdAt=f"2025-01-{1 + i // 10:02d}T{i % 10:02d}:00:00Z")
        for i in range(jobs)
    ]
    made += [snap.sync_job(inst, createdAt="2025-01-01T00:00:00Z") for _ in range(2)]  # ties
    a = await audit(snap)
    args = {"workspaceId": ws["id"], "instanceId": inst["id"], "limit": limit}
    if truncated is None:
        assert (await a.error("get_many_sync_jobs", args))["code"] == "VALIDATION_ERROR"
        return
    out = await a.ok("get_many_sync_jobs", args)
    expected = sorted(made, key=lambda j: (j["createdAt"], j["id"]), reverse=True)
    assert [j["id"] for j in out["jobs"]] == [j["id"] for j in expected[:limit]]
    assert out["truncated"] is (min(len(made), 100) > limit)


@pytest.mark.parametrize(
    ("tool", "key", "extra"),
    [
        ("get_many_executions", "executions", {}),
        ("get_many_workflows", "workflows", {"lifecycle": "all"}),
        ("get_many_workspaces", "workspaces", None),
    ],
)
async def test_response_bound_shortens_pages_never_empty(
    audit: AuditFactory, tool: str, key: str, extra: dict[str, Any] | None
) -> None:
    bound = 12 * 1024
    snap = Snapshot()
    wss = [snap.workspace(name="\U0001f600" * 200 + str(i)) for i in range(20)]
    inst = snap.instance(wss[0], name="\U0001f600" * 200)
    for i in range(40):
        snap.workflow(inst, name="\U0001f600" * 200 + str(i), present=i % 2 == 0)
        snap.execution(inst, workflowName="\U0001f600" * 100 + str(i))
    a = await audit(snap, MAX_RESPONSE_BYTES=bound)
    args: dict[str, Any] = (
        {"limit": 50} if extra is None else {"workspaceId": wss[0]["id"], "limit": 50, **extra}
    )
    seen: list[str] = []
    cursor = None
    while True:
        status, body = await a.raw(tool, args if cursor is None else {**args, "cursor": cursor})
        assert status == 200
        assert len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()) <= bound
        page = body["result"]["structuredContent"]
        assert page[key], "empty page"
        seen += [r["id"] for r in page[key]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    total = 20 if extra is None else 40
    assert len(seen) == len(set(seen)) == total


async def test_a_changed_eligible_set_invalidates_cursors(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws1, ws2 = snap.workspace(name="one"), snap.workspace(name="two")
    inst = snap.instance(ws1)
    for _ in range(3):
        snap.execution(inst)
    a = await audit(snap)
    ws_cursor = (await a.ok("get_many_workspaces", {"limit": 1}))["nextCursor"]
    ex_args = {"workspaceId": ws1["id"], "limit": 1}
    ex_cursor = (await a.ok("get_many_executions", ex_args))["nextCursor"]
    owner = ws1["members"][0]["accountId"]
    async with a.client.app[DB_POOL].acquire() as conn:
        await conn.execute(
            "DELETE FROM memberships WHERE account_id = $1 AND workspace_id = $2",
            uuid.UUID(owner),
            uuid.UUID(ws2["id"]),
        )
    err = await a.error("get_many_workspaces", {"limit": 1, "cursor": ws_cursor})
    assert err["code"] == "VALIDATION_ERROR"
    err = await a.error("get_many_executions", {**ex_args, "cursor": ex_cursor})
    assert err["code"] == "VALIDATION_ERROR"
    err = await a.error("get_workspace", {"workspaceId": ws2["id"]})
    assert err["code"] == "NOT_FOUND"
    assert [w["id"] for w in (await a.ok("get_many_workspaces", {}))["workspaces"]] == [ws1["id"]]
