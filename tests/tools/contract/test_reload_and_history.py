"""Loading is an idempotent upsert by id (docs/snapshot-format.md): reloading a changed record
changes what every tool derives from it (statistics, costMedian, workflowCount), and loading the
same file twice changes nothing. The bounded history report (§2, §9): 64 nodes, 128 runs, 16
usage rows, 1000-code-point messages, 64 pinned node ids, 48 KiB; `truncated` and
`available` → `partial`; unavailable or expired history has no nodes; null token counts."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from service.app_keys import DB_POOL
from service.store.load_snapshot import load_snapshot
from tests.support.snapshots import Snapshot
from tests.tools.contract.conftest import Audit, AuditFactory


async def _reload(a: Audit, snap: Snapshot) -> None:
    async with a.client.app[DB_POOL].acquire() as conn:
        await load_snapshot(conn, snap.document())


def _cov() -> dict[str, Any]:
    return {"state": "complete", "pricedComponents": 1, "unresolvedComponents": 0,
            "excludedComponents": 0, "observations": 1}  # fmt: skip


async def test_reloading_changed_records_moves_every_derived_value(audit: AuditFactory) -> None:
    now = datetime.now(UTC)
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    wf1, wf2 = snap.workflow(inst, name="one"), snap.workflow(inst, name="two")
    # A minute ago, but never before today's midnight (UTC): the checks read `today`.
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    recent = max(now - timedelta(minutes=1), midnight + timedelta(milliseconds=1)).isoformat()
    ex = snap.execution(inst, wf1, status="success", startedAt=recent,
                        cost={"amount": "2"}, costCoverage=_cov())  # fmt: skip
    a = await audit(snap)
    wid = ws["id"]
    args = {"workspaceId": wid, "period": "today", "timeZone": "UTC"}
    before = await a.ok("get_execution_stats", args)
    assert (before["totals"]["success"], before["cost"]["amount"]) == (1, "2")
    await _reload(a, snap)  # the same file again: nothing changes
    again = await a.ok("get_execution_stats", args)
    assert again["totals"] == before["totals"] and again["cost"] == before["cost"]
    # Move it: another status, ten days back, another workflow, another cost; archive wf1.
    ex.update(status="crashed", startedAt=(now - timedelta(days=10)).isoformat(),
              workflowId=wf2["id"], cost={"amount": "3.5"})  # fmt: skip
    wf1["archived"] = True
    await _reload(a, snap)
    today = await a.ok("get_execution_stats", args)
    assert today["totals"]["executions"] == 0 and today["cost"] is None
    month = await a.ok("get_execution_stats", {**args, "period": "30d"})
    assert (month["totals"]["failed"], month["cost"]["amount"]) == (1, "3.5")
    assert sum(b["failed"] for b in month["buckets"]) == 1
    wfs = {
        w["name"]: w
        for w in (await a.ok("get_many_workflows", {"workspaceId": wid, "lifecycle": "all"}))[
            "workflows"
        ]
    }
    assert "costMedian" not in wfs["one"]
    assert wfs["two"]["costMedian"]["cost"]["amount"] == "3.5"
    assert (await a.ok("get_many_instances", {"workspaceId": wid}))["instances"][0][
        "workflowCount"
    ] == 1
    rows = (await a.ok("get_many_executions", {"workspaceId": wid, "workflowId": wf1["id"]}))[
        "executions"
    ]
    assert rows == []


def _run(i: int, usage: int = 0, message: str = "boom") -> dict[str, Any]:
    return {
        "id": f"run-{i}", "status": "error", "startedAt": "2025-01-15T09:00:00Z",
        "durationMs": 5, "pinned": None, "error": {"name": None, "message": message},
        "usage": [{"id": f"u{k}", "model": "m", "provider": "p", "kind": "reported",
                   "pinned": False, "inputTokens": 3} for k in range(usage)],
    }  # fmt: skip


def _node(i: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": f"node-{i}", "name": f"Node {i}", "type": "t", "provenance": "recorded_run",
            "pinned": False, "runs": runs}  # fmt: skip


def _history(
    nodes: list[dict[str, Any]], availability: str = "available", pinned: int = 0
) -> dict[str, Any]:
    return {
        "schemaVersion": 1, "availability": availability, "reason": None,
        "observedAt": None, "order": "recorded", "workflowVersionId": None, "pinnedData": None,
        "pinning": {"status": "used" if pinned else "not_used", "source": "none",
                    "pinnedNodeIds": [f"node-{i}" for i in range(pinned)]},
        "failure": None, "nodes": nodes,
    }  # fmt: skip


async def _report(audit: AuditFactory, history: dict[str, Any]) -> dict[str, Any]:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    ex = snap.execution(inst, history=history)
    a = await audit(snap)
    out = await a.ok("get_execution", {"workspaceId": ws["id"], "executionId": ex["id"]})
    report: dict[str, Any] = out["history"]
    assert len(json.dumps(report, ensure_ascii=False, separators=(",", ":")).encode()) <= 48 * 1024
    return report


async def test_history_within_bounds_is_untouched(audit: AuditFactory) -> None:
    report = await _report(audit, _history([_node(0, [_run(0, usage=16)])], pinned=64))
    assert report["truncated"] is False and report["availability"] == "available"
    usage = report["nodes"][0]["runs"][0]["usage"][0]
    assert usage["inputTokens"] == 3
    assert usage["outputTokens"] is None and usage["totalTokens"] is None  # never 0
    assert len(report["pinning"]["pinnedNodeIds"]) == 64


async def test_history_counts_are_cut_and_flagged(audit: AuditFactory) -> None:
    cases: list[tuple[dict[str, Any], Callable[[dict[str, Any]], bool]]] = [
        (_history([_node(i, []) for i in range(65)]), lambda r: len(r["nodes"]) == 64),
        (_history([_node(0, [_run(i) for i in range(129)])]),
         lambda r: len(r["nodes"][0]["runs"]) == 128),
        (_history([_node(0, [_run(0, usage=17)])]),
         lambda r: len(r["nodes"][0]["runs"][0]["usage"]) == 16),
        (_history([_node(0, [_run(0, message="\U0001f600" * 1001)])]),
         lambda r: r["nodes"][0]["runs"][0]["error"]["message"] == "\U0001f600" * 1000),
        (_history([], pinned=65), lambda r: len(r["pinning"]["pinnedNodeIds"]) == 64),
    ]  # fmt: skip
    for history, check in cases:
        report = await _report(audit, history)
        assert report["truncated"] is True and report["availability"] == "partial"
        assert check(report)


async def test_history_48_kib_keeps_whole_runs_in_stored_order(audit: AuditFactory) -> None:
    runs = [_run(i, message="é" * 900) for i in range(100)]
    report = await _report(audit, _history([_node(0, runs[:30]), _node(1, runs[30:])]))
    assert report["truncated"] is True and report["availability"] == "partial"
    kept = [r["id"] for n in report["nodes"] for r in n["runs"]]
    assert kept == [f"run-{i}" for i in range(len(kept))]
    assert all(r["error"]["message"] == "é" * 900 for n in report["nodes"] for r in n["runs"])
    # The longest prefix: one more run would not fit.
    assert len(kept) < 100
    bigger = json.loads(json.dumps(report))
    bigger["nodes"][-1]["runs"].append(bigger["nodes"][-1]["runs"][-1])
    assert len(json.dumps(bigger, ensure_ascii=False, separators=(",", ":")).encode()) > 48 * 1024


async def test_unavailable_and_expired_history_has_no_nodes(audit: AuditFactory) -> None:
    for availability in ("unavailable", "expired"):
        report = await _report(audit, _history([_node(0, [_run(0)])], availability=availability))
        assert report["nodes"] == [] and report["availability"] == availability


DIRTY = "a\x00b\x01c\x7fd\x85e"
C0_DEL = "a\ufffdb\ufffdc\ufffdd\x85e"
NUL_ONLY = "a\ufffdb\x01c\x7fd\x85e"


async def test_every_history_string_is_sanitised_by_its_own_pattern(audit: AuditFactory) -> None:
    run = _run(0, usage=1)
    run["usage"][0].update(id="u" + DIRTY, model="m" + DIRTY, provider="p" + DIRTY)
    history = _history([_node(0, [run])], pinned=0)
    history.update(
        reason="r" + DIRTY,
        workflowVersionId="v" + DIRTY,
        executionError={"name": "n" + DIRTY, "message": "x" + DIRTY},
        failure={"nodeId": "f" + DIRTY, "runId": "g" + DIRTY},
    )
    history["pinning"]["pinnedNodeIds"] = ["p" + DIRTY]
    report = await _report(audit, history)
    usage = report["nodes"][0]["runs"][0]["usage"][0]
    assert (usage["id"], usage["model"], usage["provider"]) == (
        "u" + C0_DEL,
        "m" + NUL_ONLY,
        "p" + NUL_ONLY,
    )
    assert report["reason"] == "r" + NUL_ONLY
    assert report["workflowVersionId"] == "v" + C0_DEL
    assert report["executionError"] == {"name": "n" + NUL_ONLY, "message": "x" + NUL_ONLY}
    assert report["failure"] == {"nodeId": "f" + C0_DEL, "runId": "g" + C0_DEL}
    assert report["pinning"]["pinnedNodeIds"] == ["p" + C0_DEL]
    assert report["truncated"] is False


async def test_history_strings_past_max_length_are_cut_and_flagged(audit: AuditFactory) -> None:
    run = _run(0, usage=1)
    run["usage"][0]["model"] = "\U0001f600" * 201
    report = await _report(audit, _history([_node(0, [run])]))
    assert report["nodes"][0]["runs"][0]["usage"][0]["model"] == "\U0001f600" * 200
    assert report["truncated"] is True and report["availability"] == "partial"
    report = await _report(audit, {**_history([]), "reason": "r" * 301})
    assert report["reason"] == "r" * 300 and report["truncated"] is True
