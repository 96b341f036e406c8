"""docs/reading-rules.md coverage and cost rules and the fine print on executions: coverage scope
per tool (workspace, or the instanceId; the workspace's for single-record tools), costMedian,
absent versus null cost, amounts' notation, durationMs, and the period filter of the list."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import AuditFactory


def _cov(state: str = "complete", **more: int) -> dict[str, Any]:
    return {"state": state, "pricedComponents": 1, "unresolvedComponents": 0,
            "excludedComponents": 0, "observations": 1, **more}  # fmt: skip


def _coverage_world() -> tuple[Snapshot, dict[str, Any]]:
    snap = Snapshot()
    ws = snap.workspace()
    other_ws = snap.workspace()
    a = snap.instance(ws, lastSyncAt="2025-01-15T09:00:00Z", historyComplete=True)
    b = snap.instance(
        ws,
        lastSyncAt="2025-01-16T09:00:00Z",
        historyComplete=False,
        workflowInventoryTruncated=True,
    )
    c = snap.instance(other_ws, lastSyncAt="2025-02-01T00:00:00Z")
    wf_a = snap.workflow(a, observedAt="2025-01-12T00:00:00Z")
    snap.workflow(a, observedAt="2025-01-02T00:00:00Z", present=False)  # historical, earliest of a
    wf_b = snap.workflow(b, observedAt="2025-01-01T00:00:00Z")
    snap.workflow(c, observedAt="2024-01-01T00:00:00Z")
    ex_a = snap.execution(a, wf_a, observedAt="2025-01-10T00:00:00Z", status="success")
    snap.execution(a, observedAt="2025-01-03T00:00:00Z", status="error")  # earliest of a
    snap.execution(b, wf_b, observedAt="2025-01-05T00:00:00Z")
    snap.execution(b, observedAt="2025-01-01T00:00:00Z", startedAt=None, createdAt=None)
    snap.execution(c, observedAt="2020-01-01T00:00:00Z")
    return snap, {"ws": ws, "a": a, "b": b, "wf_a": wf_a, "ex_a": ex_a}


def _c(first: str | None, last: str | None, wf_trunc: bool, ex_trunc: bool) -> dict[str, Any]:
    return {"firstObservedAt": first, "lastSuccessfulSyncAt": last, "partial": True,
            "workflowsTruncated": wf_trunc, "executionsTruncated": ex_trunc}  # fmt: skip


def _norm(cov: dict[str, Any]) -> dict[str, Any]:
    out = dict(cov)
    for key in ("firstObservedAt", "lastSuccessfulSyncAt"):
        if out[key] is not None:
            out[key] = datetime.fromisoformat(out[key]).astimezone(UTC).isoformat()
    return out


def _expect(first: str, last: str, wf: bool, ex: bool) -> dict[str, Any]:
    return _norm(_c(first, last, wf, ex))


async def test_coverage_scope_per_tool(audit: AuditFactory) -> None:
    snap, w = _coverage_world()
    a = await audit(snap, workspaces=[w["ws"]["id"]])
    wid = w["ws"]["id"]
    ws_ex = _expect("2025-01-01T00:00:00Z", "2025-01-16T09:00:00Z", True, True)
    a_ex = _expect("2025-01-03T00:00:00Z", "2025-01-15T09:00:00Z", False, False)
    ws_wf = _expect("2025-01-01T00:00:00Z", "2025-01-16T09:00:00Z", True, True)
    a_wf = _expect("2025-01-02T00:00:00Z", "2025-01-15T09:00:00Z", False, False)

    def got(out: dict[str, Any]) -> dict[str, Any]:
        return _norm(out["coverage"])

    assert got(await a.ok("get_many_executions", {"workspaceId": wid})) == ws_ex
    assert (
        got(await a.ok("get_many_executions", {"workspaceId": wid, "instanceId": w["a"]["id"]}))
        == a_ex
    )
    assert got(await a.ok("get_many_workflows", {"workspaceId": wid})) == ws_wf
    assert (
        got(await a.ok("get_many_workflows", {"workspaceId": wid, "instanceId": w["a"]["id"]}))
        == a_wf
    )
    # Single-record tools: the workspace's coverage, not the record's instance's.
    assert (
        got(await a.ok("get_execution", {"workspaceId": wid, "executionId": w["ex_a"]["id"]}))
        == ws_ex
    )
    assert (
        got(await a.ok("get_workflow", {"workspaceId": wid, "workflowId": w["wf_a"]["id"]}))
        == ws_wf
    )
    stats = await a.ok(
        "get_execution_stats", {"workspaceId": wid, "period": "today", "timeZone": "UTC"}
    )
    assert got(stats) == ws_ex


async def test_coverage_does_not_depend_on_filters_other_than_instance(audit: AuditFactory) -> None:
    snap, w = _coverage_world()
    a = await audit(snap, workspaces=[w["ws"]["id"]])
    wid = w["ws"]["id"]
    ws_ex = _expect("2025-01-01T00:00:00Z", "2025-01-16T09:00:00Z", True, True)
    for args in ({"status": "success"}, {"period": "today"}, {"workflowId": w["wf_a"]["id"]}):
        out = await a.ok("get_many_executions", {"workspaceId": wid, **args})
        assert _norm(out["coverage"]) == ws_ex, args
    for lifecycle in ("current", "historical", "all"):
        out = await a.ok("get_many_workflows", {"workspaceId": wid, "lifecycle": lifecycle})
        assert _norm(out["coverage"])["firstObservedAt"] == ws_ex["firstObservedAt"], lifecycle


async def test_coverage_of_an_empty_workspace(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    a = await audit(snap)
    out = await a.ok("get_many_executions", {"workspaceId": ws["id"]})
    assert out["coverage"] == _c(None, None, False, False)
    assert out["executions"] == [] and out["nextCursor"] is None


async def _median(audit: AuditFactory, rows: list[dict[str, Any]]) -> dict[str, Any]:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    wf = snap.workflow(inst)
    for row in rows:
        snap.execution(inst, wf, **row)
    a = await audit(snap)
    listed = (await a.ok("get_many_workflows", {"workspaceId": ws["id"]}))["workflows"][0]
    one = await a.ok("get_workflow", {"workspaceId": ws["id"], "workflowId": wf["id"]})
    single: dict[str, Any] = one["workflow"]
    assert listed.get("costMedian") == single.get("costMedian")
    assert listed.get("missingMappingObservations") == single.get("missingMappingObservations")
    return single


def _priced(amount: str, state: str = "complete", **more: int) -> dict[str, Any]:
    return {"cost": {"amount": amount}, "costCoverage": _cov(state, **more)}


@pytest.mark.parametrize(
    ("rows", "median", "priced", "total", "partial"),
    [
        ([_priced("1.500"), _priced("3"), _priced("0.1")], "1.5", 3, 3, False),
        ([_priced("1"), _priced("2")], "1.5", 2, 2, False),
        ([_priced("0.1"), _priced("0.2"), {}], "0.15", 2, 3, True),
        ([_priced("0.000000000000000001"), _priced("0")], None, 2, 2, False),
        ([_priced("0.000000000000000002"), _priced("0")], "0.000000000000000001", 2, 2, False),
        ([_priced("5", "partial")], "5", 1, 1, True),
        ([_priced("5", "pending")], "5", 1, 1, True),
        ([{"cost": {"amount": "5"}}], "5", 1, 1, True),
        ([{"cost": None}, {}], None, 0, 2, True),
        ([_priced("0.000"), _priced("0.0")], "0", 2, 2, False),
        ([_priced("9" * 38), _priced("9" * 38)], "9" * 38, 2, 2, False),
    ],
)
async def test_cost_median(
    audit: AuditFactory,
    rows: list[dict[str, Any]],
    median: str | None,
    priced: int,
    total: int,
    partial: bool,
) -> None:
    wf = await _median(audit, rows)
    cm = wf["costMedian"]
    assert (cm["cost"] or {}).get("amount") == median
    assert (cm["pricedExecutions"], cm["totalExecutions"], cm["partial"]) == (
        priced,
        total,
        partial,
    )


async def test_cost_median_absent_without_executions(audit: AuditFactory) -> None:
    wf = await _median(audit, [])
    assert "costMedian" not in wf and "missingMappingObservations" not in wf


async def test_workflow_missing_mapping_observations(audit: AuditFactory) -> None:
    wf = await _median(audit, [_priced("1", missingMappingObservations=4), _priced("1"), {}])
    assert wf["missingMappingObservations"] == 4
    wf = await _median(audit, [_priced("1"), {}])
    assert "missingMappingObservations" not in wf


async def test_execution_cost_absent_null_and_notation(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    absent = snap.execution(inst)
    null = snap.execution(inst, cost=None, costCoverage=None)
    priced = snap.execution(inst, cost={"amount": "1.500"}, costCoverage=_cov())
    zero = snap.execution(inst, cost={"amount": "0.000"}, costCoverage=_cov())
    a = await audit(snap)
    rows = {
        r["id"]: r
        for r in (await a.ok("get_many_executions", {"workspaceId": ws["id"]}))["executions"]
    }
    assert "cost" not in rows[absent["id"]] and "costCoverage" not in rows[absent["id"]]
    # costCoverage is not nullable in the output schema: a null one is omitted.
    assert rows[null["id"]]["cost"] is None and "costCoverage" not in rows[null["id"]]
    assert rows[priced["id"]]["cost"]["amount"] == "1.5"
    assert rows[zero["id"]]["cost"]["amount"] == "0"
    one = await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": priced["id"]})
    assert one["execution"] == rows[priced["id"]]


@pytest.mark.parametrize(
    ("started", "stopped", "ms"),
    [
        ("2025-01-15T09:00:00Z", "2025-01-15T09:00:01.5009Z", 1500),
        ("2025-01-15T09:00:00.0009Z", "2025-01-15T09:00:00.0021Z", 1),
        ("2025-01-15T09:00:00.000999Z", "2025-01-15T09:00:00.001Z", 0),
        ("2025-01-15T10:00:00+01:00", "2025-01-15T09:00:02Z", 2000),
        ("2025-01-15T09:00:01Z", "2025-01-15T09:00:00Z", None),
        (None, "2025-01-15T09:00:00Z", None),
        ("2025-01-15T09:00:00Z", None, None),
        ("2024-01-15T09:00:00Z", "2025-01-15T09:00:00Z", 366 * 86_400_000),
    ],
)
async def test_duration_ms(
    audit: AuditFactory, started: str | None, stopped: str | None, ms: int | None
) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    ex = snap.execution(inst, startedAt=started, stoppedAt=stopped)
    a = await audit(snap)
    listed = (await a.ok("get_many_executions", {"workspaceId": ws["id"]}))["executions"][0]
    single = (await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": ex["id"]}))[
        "execution"
    ]
    assert listed["durationMs"] == single["durationMs"] == ms


async def test_undated_rows_only_in_period_all(audit: AuditFactory) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    now = datetime.now(UTC)
    # Five minutes ago, but never before today's midnight (UTC): just after midnight, five
    # minutes ago is yesterday and outside `today`.
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    started = max(now - timedelta(minutes=5), midnight + timedelta(milliseconds=1))
    recent = snap.execution(inst, startedAt=started.isoformat())
    undated = snap.execution(inst, startedAt=None, createdAt=None, observedAt=now.isoformat())
    future = snap.execution(inst, startedAt=(now + timedelta(hours=2)).isoformat())
    a = await audit(snap)

    def ids(out: dict[str, Any]) -> set[str]:
        return {r["id"] for r in out["executions"]}

    everything = await a.ok("get_many_executions", {"workspaceId": ws["id"]})
    assert everything["period"] == "all" and everything["timeZone"] == "UTC"
    assert ids(everything) == {recent["id"], undated["id"], future["id"]}
    for period in ("today", "7d", "30d"):
        out = await a.ok("get_many_executions", {"workspaceId": ws["id"], "period": period})
        assert ids(out) == {recent["id"]}, period
