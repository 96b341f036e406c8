"""The demo snapshot without a database: deterministic, relative to `now`, and holding every
case it promises (docs/decisions/demo.md), in shapes the service's bounds accept."""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from service.demo.document import DEFAULT_SEED, DEMO_EMAIL, demo_snapshot, demo_workspace_ids
from service.rules.history import HistoryIn, bound_history
from tests.demo.conftest import NOW

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).parents[2] / "service" / "contract" / "elova-tools.json"
AMOUNT = re.compile(r"^(?:0|[1-9]\d{0,37})(?:\.\d{1,18})?\Z")


def _at(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _output_schema(tool: str) -> dict[str, Any]:
    tools = json.loads(CATALOG.read_text("utf-8"))["tools"]
    schema: dict[str, Any] = next(t for t in tools if t["name"] == tool)["outputSchema"]
    return schema


def _ids(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {array: sorted(r["id"] for r in rows) for array, rows in doc.items()}


def test_same_seed_and_now_give_the_same_document(snapshot: dict[str, Any]) -> None:
    again = demo_snapshot(DEFAULT_SEED, NOW)
    assert msgspec.json.encode(again) == msgspec.json.encode(snapshot)


def test_a_later_run_upserts_the_same_records_with_fresher_times(
    snapshot: dict[str, Any],
) -> None:
    later = demo_snapshot(DEFAULT_SEED, NOW + timedelta(days=3, hours=5, seconds=7))
    assert _ids(later) == _ids(snapshot)
    newest = max(e["observedAt"] for e in later["executions"])
    assert _at(newest) > NOW + timedelta(days=3)  # type: ignore[operator]


def test_another_seed_gives_other_ids(snapshot: dict[str, Any]) -> None:
    other = demo_snapshot(DEFAULT_SEED + 1, NOW)
    assert not set(_ids(other)["executions"]) & set(_ids(snapshot)["executions"])
    assert demo_workspace_ids(DEFAULT_SEED + 1) != demo_workspace_ids(DEFAULT_SEED)


def test_ids_are_unique_lowercase_uuids(snapshot: dict[str, Any]) -> None:
    pattern = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}\Z")
    for array, ids in _ids(snapshot).items():
        assert len(set(ids)) == len(ids), array
        assert all(pattern.match(i) for i in ids), array


def test_times_are_recent_relative_to_now(snapshot: dict[str, Any]) -> None:
    dated = [_at(e["startedAt"] or e["createdAt"]) for e in snapshot["executions"]]
    known = [d for d in dated if d is not None]
    assert NOW - timedelta(minutes=2) < max(known) <= NOW + timedelta(minutes=1)
    assert NOW - timedelta(days=125) < min(known) < NOW - timedelta(days=90)
    observed = [_at(e["observedAt"]) for e in snapshot["executions"]]
    assert max(o for o in observed if o is not None) <= NOW
    jobs = [_at(j["createdAt"]) for j in snapshot["syncJobs"]]
    assert max(j for j in jobs if j is not None) <= NOW


def test_accounts_roles_and_isolation(snapshot: dict[str, Any]) -> None:
    by_email = {a["email"]: a for a in snapshot["accounts"]}
    demo = by_email[DEMO_EMAIL]
    assert demo["password"] == "demo-password-change-me"
    roles: Counter[str] = Counter()
    other_only = []
    for ws in snapshot["workspaces"]:
        members = {m["accountId"]: m["role"] for m in ws["members"]}
        if demo["id"] in members:
            roles[members[demo["id"]]] += 1
        else:
            other_only.append(ws["name"])
    assert set(roles) == {"owner", "admin", "member"}
    assert other_only, "a workspace the demo account cannot see shows isolation"
    assert sorted(demo_workspace_ids()) == sorted(
        ws["id"] for ws in snapshot["workspaces"] if demo["id"] in str(ws["members"])
    )


def test_workspaces_cover_zones_long_and_astral_names(snapshot: dict[str, Any]) -> None:
    zones = {ws["timeZone"] for ws in snapshot["workspaces"]}
    assert {"Europe/Berlin", "America/New_York", "Asia/Kathmandu", "Australia/Sydney"} <= zones
    names = [ws["name"] for ws in snapshot["workspaces"]]
    assert any(len(n) > 200 for n in names)  # shortened silently on read
    assert any(any(ord(c) > 0xFFFF for c in n) for n in names)


def test_instances_and_sync_jobs_cover_every_state(snapshot: dict[str, Any]) -> None:
    instances = snapshot["instances"]
    assert {i["status"] for i in instances} == {"pending", "connected", "error"}
    assert any(not i["historyComplete"] for i in instances)
    assert any(i["workflowInventoryTruncated"] for i in instances)
    codes = {i["syncState"]["errorCode"] for i in instances} - {None}
    assert codes and all(c.startswith("N8N_") for c in codes)
    jobs = snapshot["syncJobs"]
    per_instance = Counter(j["instanceId"] for j in jobs)
    assert max(per_instance.values()) > 100
    assert {j["scope"] for j in jobs} == {"all", "workflows", "executions", "metadata"}
    assert {j["trigger"] for j in jobs} == {"initial", "manual", "scheduled"}
    assert {j["status"] for j in jobs} == {"queued", "running", "succeeded", "failed"}
    for job in jobs:
        assert (job["errorCode"] is not None) == (job["status"] == "failed")
        assert (job["finishedAt"] is None) == (job["status"] in ("queued", "running"))


def test_instance_sync_fields_agree_with_its_jobs(snapshot: dict[str, Any]) -> None:
    for inst in snapshot["instances"]:
        jobs = sorted(
            (j for j in snapshot["syncJobs"] if j["instanceId"] == inst["id"]),
            key=lambda j: _at(j["createdAt"]),  # type: ignore[arg-type,return-value]
            reverse=True,
        )
        assert inst["syncState"]["status"] == jobs[0]["status"]
        done = [_at(j["finishedAt"]) for j in jobs if j["status"] == "succeeded"]
        expected = max((d for d in done if d is not None), default=None)
        assert _at(inst["lastSyncAt"]) == expected


def test_workflows_current_and_historical(snapshot: dict[str, Any]) -> None:
    workflows = snapshot["workflows"]
    assert any(w["present"] is False for w in workflows)
    assert any(w.get("archived") is True for w in workflows)
    assert any("archived" in w and w["archived"] is None for w in workflows)
    removed = [w for w in workflows if w.get("definitionAvailable") is False]
    assert removed and all(w["definitionRemovedAt"] and not w["nodes"] for w in removed)
    assert any(len(w["name"]) > 200 for w in workflows)
    types = {n["type"] for w in workflows for n in w["nodes"]}
    assert {"n8n-nodes-base.httpRequest", "@n8n/n8n-nodes-langchain.lmChatOpenAi"} <= types
    nodes = [n for w in workflows for n in w["nodes"]]
    assert any(n["disabled"] for n in nodes)
    assert any(n["typeVersion"] is None for n in nodes)
    assert any(isinstance(n["typeVersion"], float) for n in nodes)
    big = max(workflows, key=lambda w: len(w["nodes"]))
    assert len(big["nodes"]) == 1000
    inventory = msgspec.json.encode(big["nodes"])
    assert len(inventory) > 32 * 1024


def test_executions_cover_statuses_and_odd_rows(snapshot: dict[str, Any]) -> None:
    rows = snapshot["executions"]
    assert len(rows) > 5000
    statuses = Counter(e["status"] for e in rows)
    assert set(statuses) == {
        "success", "error", "crashed", "canceled", "new", "running", "waiting", "unknown",
    }  # fmt: skip
    assert statuses["success"] > len(rows) * 0.8  # weighted like real instances
    per_workflow = Counter(e["workflowId"] for e in rows)
    assert max(per_workflow.values()) > 10 * min(per_workflow.values())  # skewed
    assert any(e["workflowId"] is None for e in rows)
    undated = [e for e in rows if e["startedAt"] is None and e["createdAt"] is None]
    assert len(undated) >= 10
    # No row is dated after `now` (nor after its own observedAt: tests/demo/test_timelines.py).
    assert not [e for e in rows if e["startedAt"] and _at(e["startedAt"]) > NOW]  # type: ignore[operator]
    assert any(len(e["workflowName"]) > 100 for e in rows)
    assert any(e["sourceMissing"] for e in rows)
    for e in rows:
        if e["status"] in ("success", "error", "crashed", "canceled"):
            assert e["stoppedAt"] is not None, e["id"]


def test_costs_are_exact_decimal_strings_with_coverage(snapshot: dict[str, Any]) -> None:
    rows = snapshot["executions"]
    priced = [e for e in rows if e.get("cost")]
    assert len(priced) > 500
    for e in priced:
        assert AMOUNT.match(e["cost"]["amount"]), e["cost"]
        assert Decimal(e["cost"]["amount"]) >= 0
        assert e["costCoverage"]["state"] in ("complete", "partial")
    assert any("cost" not in e for e in rows)  # older rows predate pricing
    assert any("cost" in e and e["cost"] is None for e in rows)
    states = {e["costCoverage"]["state"] for e in rows if "costCoverage" in e}
    assert states == {"pending", "complete", "partial", "unavailable", "not_applicable"}
    coverages = [e["costCoverage"] for e in rows if "costCoverage" in e]
    assert any(c.get("missingMappingObservations") for c in coverages)
    assert any("missingMappingObservations" not in c for c in coverages)


def _usage_rows(history: dict[str, Any]) -> list[dict[str, Any]]:
    return [u for n in history["nodes"] for r in n["runs"] for u in r["usage"]]


def test_histories_cover_failures_usage_and_bounds(snapshot: dict[str, Any]) -> None:
    histories = [e["history"] for e in snapshot["executions"] if "history" in e]
    assert len(histories) > 300
    assert {h["availability"] for h in histories} == {"available", "unavailable", "expired"}
    failed = [h for h in histories if h["failure"]]
    assert failed and all(h["executionError"]["message"] for h in failed)
    usage = [u for h in histories for u in _usage_rows(h)]
    assert any(u["inputTokens"] and u["totalTokens"] for u in usage)
    assert any(u["inputTokens"] is None for u in usage)  # missing counts stay null
    assert any(h["pinning"]["status"] == "used" for h in histories)
    assert any(len(h["nodes"]) > 64 for h in histories)
    assert any(max((len(n["runs"]) for n in h["nodes"]), default=0) > 128 for h in histories)


@pytest.fixture(scope="module")
def history_validator() -> jsonschema.Draft202012Validator:
    schema = _output_schema("get_execution")["properties"]["history"]
    return jsonschema.Draft202012Validator(schema)


def test_every_history_fits_the_schema_after_the_services_bounds(
    snapshot: dict[str, Any], history_validator: jsonschema.Draft202012Validator
) -> None:
    partial = 0
    for e in snapshot["executions"]:
        if "history" not in e:
            continue
        raw = msgspec.json.encode(e["history"])
        bounded = json.loads(bound_history(msgspec.json.decode(raw, type=HistoryIn)))
        history_validator.validate(bounded)
        partial += bounded["availability"] == "partial"
    assert partial > 0  # some reports pass a bound, and the service says so


def test_document_is_small_enough_to_load_quickly(snapshot: dict[str, Any]) -> None:
    size = len(msgspec.json.encode(snapshot))
    assert size < 12 * 1024 * 1024, size


def test_now_defaults_to_the_clock() -> None:
    doc = demo_snapshot()
    newest = max(_at(j["createdAt"]) for j in doc["syncJobs"])  # type: ignore[type-var]
    assert datetime.now(UTC) - newest < timedelta(hours=2)  # type: ignore[operator]
