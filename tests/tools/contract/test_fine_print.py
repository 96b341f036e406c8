"""Smaller rules of docs/snapshot-format.md and docs/reading-rules.md: sorting by the full stored
name (not the shortened one), instants compared as instants, the `failed` status filter, loader
refusals of values no tool could return, absent versus null inside a history, and arguments typed as
the schema."""

from __future__ import annotations

from typing import Any

import pytest

from service.errors import LoadError
from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import AuditFactory
from tests.tools.contract.test_reload_and_history import _history


async def test_sort_uses_the_full_stored_name(audit: AuditFactory) -> None:
    snap = Snapshot()
    ids = sorted(
        ["f" * 8 + "-ffff-4fff-bfff-ffffffffffff", "0" * 8 + "-0000-4000-8000-000000000001"]
    )
    low, high = ids
    # Equal once shortened to 200; the full names order them against their ids.
    snap.workspace(id=high, name="a" * 200 + "a")
    snap.workspace(id=low, name="a" * 200 + "b")
    a = await audit(snap)
    rows = await a.pages("get_many_workspaces", {"limit": 1}, "workspaces")
    assert [r["id"] for r in rows] == [high, low]

    snap2 = Snapshot()
    ws = snap2.workspace()
    inst = snap2.instance(ws)
    w_high = snap2.workflow(inst, name="w" * 200 + "a")
    w_low = snap2.workflow(inst, name="w" * 200 + "b")
    if w_high["id"] < w_low["id"]:
        w_high["id"], w_low["id"] = w_low["id"], w_high["id"]
    i_high = snap2.instance(ws, name="i" * 200 + "a")
    i_low = snap2.instance(ws, name="i" * 200 + "b")
    if i_high["id"] < i_low["id"]:
        i_high["id"], i_low["id"] = i_low["id"], i_high["id"]
    a2 = await audit(snap2)
    rows = await a2.pages("get_many_workflows", {"workspaceId": ws["id"], "limit": 1}, "workflows")
    assert [r["id"] for r in rows] == [w_high["id"], w_low["id"]]
    got = (await a2.ok("get_many_instances", {"workspaceId": ws["id"]}))["instances"]
    assert [r["id"] for r in got][1:] == [i_high["id"], i_low["id"]]


async def test_instants_compare_as_instants(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    earlier = snap.sync_job(inst, createdAt="2025-01-15T10:00:00+01:00")  # 09:00Z
    later = snap.sync_job(inst, createdAt="2025-01-15T09:30:00Z")
    ex_earlier = snap.execution(inst, startedAt="2025-01-15T10:00:00+01:00")
    ex_later = snap.execution(inst, startedAt="2025-01-15T09:30:00Z")
    a = await audit(snap)
    jobs = (await a.ok("get_many_sync_jobs", {"workspaceId": ws["id"], "instanceId": inst["id"]}))[
        "jobs"
    ]
    assert [j["id"] for j in jobs] == [later["id"], earlier["id"]]
    rows = (await a.ok("get_many_executions", {"workspaceId": ws["id"]}))["executions"]
    assert [r["id"] for r in rows] == [ex_later["id"], ex_earlier["id"]]


async def test_failed_filter_is_error_and_crashed(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    statuses = ("success", "error", "crashed", "canceled", "running", "waiting", "new", "unknown")
    made = {s: [snap.execution(inst, status=s) for _ in range(3)] for s in statuses}
    a = await audit(snap)

    def ids(rows: list[dict[str, Any]]) -> list[str]:
        return sorted(r["id"] for r in rows)

    failed = await a.pages(
        "get_many_executions",
        {"workspaceId": ws["id"], "status": "failed", "limit": 2},
        "executions",
    )
    assert ids(failed) == sorted(e["id"] for e in made["error"] + made["crashed"])
    for status, rows in made.items():
        got = await a.pages(
            "get_many_executions",
            {"workspaceId": ws["id"], "status": status, "limit": 2},
            "executions",
        )
        assert ids(got) == sorted(e["id"] for e in rows), status


@pytest.mark.parametrize(
    ("kind", "override"),
    [
        ("workspace", {"timeZone": "Mars/Base"}),
        ("workspace", {"timeZone": "europe/berlin"}),
        ("workspace", {"executionPollIntervalSeconds": 0}),
        ("workspace", {"executionPollIntervalSeconds": 86401}),
        ("instance", {"workflowIntervalMinutes": 10081}),
        ("instance", {"name": ""}),
        ("workflow", {"name": ""}),
        ("workflow", {"id": "not-a-uuid"}),
    ],
)
async def test_loader_refuses_values_no_tool_could_return(
    audit: AuditFactory, kind: str, override: dict[str, Any]
) -> None:
    snap = Snapshot()
    ws = snap.workspace(**(override if kind == "workspace" else {}))
    inst = snap.instance(ws, **(override if kind == "instance" else {}))
    snap.workflow(inst, **(override if kind == "workflow" else {}))
    with pytest.raises(LoadError):
        await audit(snap)


async def test_history_execution_error_absent_and_null_stay_distinct(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    absent = snap.execution(inst, history=_history([]))
    null = snap.execution(inst, history={**_history([]), "executionError": None})
    given = snap.execution(
        inst, history={**_history([]), "executionError": {"name": "E", "message": "m"}}
    )
    a = await audit(snap)

    async def get(ex: dict[str, Any]) -> dict[str, Any]:
        return await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": ex["id"]})

    assert "executionError" not in (await get(absent))["history"]
    assert (await get(null))["history"]["executionError"] is None
    assert (await get(given))["history"]["executionError"] == {"name": "E", "message": "m"}


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_many_executions", {"cursor": None}),
        ("get_many_executions", {"instanceId": None}),
        ("get_many_executions", {"status": "FAILED"}),
        ("get_many_executions", {"period": "1d"}),
        ("get_many_workflows", {"lifecycle": "archived"}),
        ("get_many_workflows", {"cursor": ""}),
        ("get_many_executions", {"cursor": "x" * 4097}),
        ("get_many_executions", {"workflowId": "33333333-3333-4333-8333-33333333333"}),
        ("get_many_executions", {"instanceId": "33333333-3333-4333-7333-333333333333"}),
        ("get_many_executions", {"instanceId": "33333333-3333-4333-8333-333333333333\n"}),
        ("get_many_executions", {"timeZone": None}),
        ("get_many_sync_jobs", {}),
        ("get_execution", {}),
        ("get_many_executions", {"extra": 1}),
    ],
)
async def test_malformed_arguments_are_validation_errors(
    audit: AuditFactory, tool: str, args: dict[str, Any]
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    a = await audit(snap)
    err = await a.error(tool, {"workspaceId": ws["id"], **args})
    assert err["code"] == "VALIDATION_ERROR" and err["retryable"] is False


async def test_list_defaults_to_period_all_and_the_workspace_zone(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Kathmandu")
    inst = snap.instance(ws)
    plain = snap.execution(inst)
    snap.execution(inst, history=_history([]))
    a = await audit(snap)
    out = await a.ok("get_many_executions", {"workspaceId": ws["id"]})
    assert (out["period"], out["timeZone"]) == ("all", "Asia/Kathmandu")
    assert out["asOf"].endswith("+05:45")
    one = await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": plain["id"]})
    assert "history" not in one
