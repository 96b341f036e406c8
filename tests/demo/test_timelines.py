"""The demo's timelines hold together (tests/demo/timelines.py has the rules): over the
whole demo snapshot, over a bulk data set, and as a user reads them through the tools —
the first page of executions a user sees, and every failed execution with a history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from service.demo.bulk import BulkPlan, build_world, snapshot
from service.demo.document import DEFAULT_SEED, demo_snapshot, demo_workspace_ids
from tests.demo.conftest import NOW
from tests.demo.test_tools import DemoClient, demo  # noqa: F401 (the fixture)
from tests.demo.timelines import execution_problems, problems


def _runs(doc: dict[str, Any]) -> int:
    return sum(
        len(node["runs"])
        for e in doc["executions"]
        for node in (e.get("history") or {}).get("nodes", [])
    )


def test_the_demo_snapshot_holds_together(snapshot: dict[str, Any]) -> None:
    assert problems(snapshot, NOW) == []
    assert _runs(snapshot) > 3000  # the rules had runs to check
    failed = [e for e in snapshot["executions"] if e["status"] == "error" and e.get("history")]
    assert len(failed) > 100


def test_other_seeds_and_clocks_hold_together_too() -> None:
    """Not an accident of one seed: another seed, and the real clock `make run` uses."""
    for seed, now in ((DEFAULT_SEED + 1, NOW), (DEFAULT_SEED, datetime.now(UTC))):
        doc = demo_snapshot(seed, now)
        assert problems(doc, now + timedelta(seconds=1)) == [], seed


def test_bulk_data_holds_together() -> None:
    now = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
    plan = BulkPlan(workspaces=2, instances=4, workflows=30, executions=4000, seed=5, now=now)
    doc = snapshot(build_world(plan))
    assert problems(doc, now) == []
    assert _runs(doc) > 500


async def test_timelines_through_the_tools(
    demo: DemoClient,  # noqa: F811 (the fixture imported above)
    demo_loaded: dict[str, Any],
) -> None:
    # The first list a user sees: the newest executions of each workspace.
    for ws_id in demo_workspace_ids():
        page = await demo.call("get_many_executions", workspaceId=ws_id)
        as_of = datetime.fromisoformat(page["asOf"])
        for row in page["executions"]:
            assert execution_problems(row, as_of) == [], row
    # Every failed execution with a history, read one by one.
    workspace_of = {i["id"]: i["workspaceId"] for i in demo_loaded["instances"]}
    visible = set(demo_workspace_ids())
    failed = [
        e
        for e in demo_loaded["executions"]
        if e["status"] in ("error", "crashed")
        and e.get("history", {}).get("availability") == "available"  # partial on read when cut
        and workspace_of[e["instanceId"]] in visible
    ]
    assert len(failed) > 50
    checked_failures = 0
    for row in failed:
        got = await demo.call(
            "get_execution", workspaceId=workspace_of[row["instanceId"]], executionId=row["id"]
        )
        answer = {**got["execution"], "history": got["history"]}
        assert execution_problems(answer) == [], row["id"]
        checked_failures += got["history"].get("failure") is not None
    assert checked_failures > 50
