"""The bounded history report: every bound, the 48 KiB prefix rule, sanitising, nulls."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import msgspec
import pytest
from jsonschema import Draft202012Validator

from service.rules.history import MAX_BYTES, HistoryIn, bound_history
from tests.tools.execution_support import CATALOG

pytestmark = pytest.mark.unit

ASTRAL = "\U0001f600"


@cache
def history_validator() -> Draft202012Validator:
    catalog = json.loads(CATALOG.read_text("utf-8"))
    schema = next(t["outputSchema"] for t in catalog["tools"] if t["name"] == "get_execution")
    return Draft202012Validator(
        schema["properties"]["history"], format_checker=Draft202012Validator.FORMAT_CHECKER
    )


def usage(**overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": "u1",
        "model": "openai/gpt-4o-mini",
        "provider": "openai",
        "kind": "reported",
        "pinned": None,
        "inputTokens": 10,
        "outputTokens": 5,
        "totalTokens": 15,
        "cachedInputTokens": None,
        "reasoningTokens": None,
    }
    row.update(overrides)
    return row


def run(index: int = 0, **overrides: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"run-{index}",
        "status": "success",
        "startedAt": "2025-01-15T09:00:01+01:00",
        "durationMs": 420,
        "pinned": None,
        "error": None,
        "usage": [],
    }
    row.update(overrides)
    return row


def node(
    index: int = 0, runs: list[dict[str, Any]] | None = None, **overrides: Any
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": f"node-{index}",
        "name": f"Node {index}",
        "type": "n8n-nodes-base.set",
        "provenance": "recorded_run",
        "pinned": None,
        "runs": [run(0)] if runs is None else runs,
    }
    row.update(overrides)
    return row


def history(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "availability": "available",
        "reason": None,
        "observedAt": "2025-01-15T09:05:00Z",
        "order": "recorded",
        "workflowVersionId": None,
        "pinnedData": False,
        "pinning": {"status": "not_used", "source": "none", "pinnedNodeIds": []},
        "failure": None,
        "nodes": [node(0)],
        "truncated": False,
    }
    doc.update(overrides)
    return doc


def bound(doc: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
    raw = bound_history(msgspec.convert(doc, HistoryIn))
    report: dict[str, Any] = json.loads(raw)
    errors = [e.message[:200] for e in history_validator().iter_errors(report)]
    assert not errors, errors
    assert len(raw) <= MAX_BYTES
    # compact UTF-8 JSON, non-ASCII not escaped
    assert raw == json.dumps(report, separators=(",", ":"), ensure_ascii=False).encode()
    return report, raw


def test_small_report_is_kept_whole_and_in_schema_order() -> None:
    report, _ = bound(history(executionError={"name": None, "message": "boom"}))
    assert list(report) == [
        "schemaVersion", "availability", "reason", "observedAt", "order", "workflowVersionId",
        "pinnedData", "executionError", "pinning", "failure", "nodes", "truncated",
    ]  # fmt: skip
    assert report["availability"] == "available"
    assert report["truncated"] is False
    assert report["nodes"][0]["runs"][0]["startedAt"] == "2025-01-15T08:00:01Z"
    assert "executionError" not in bound(history())[0]  # absent stays absent


def test_every_count_bound_cuts_and_marks_partial() -> None:
    big_run = run(0, usage=[usage(id=f"u{i}") for i in range(20)])
    doc = history(
        nodes=[node(0, runs=[big_run] + [run(i) for i in range(1, 130)])]
        + [node(i) for i in range(1, 70)],
        pinning={"status": "used", "source": "execution_pin_data",
                 "pinnedNodeIds": [f"n{i}" for i in range(70)]},
    )  # fmt: skip
    report, _ = bound(doc)
    assert report["truncated"] is True
    assert report["availability"] == "partial"
    assert len(report["pinning"]["pinnedNodeIds"]) == 64
    assert len(report["nodes"]) == 64
    assert len(report["nodes"][0]["runs"]) == 128
    assert len(report["nodes"][0]["runs"][0]["usage"]) == 16
    assert [n["id"] for n in report["nodes"]] == [f"node-{i}" for i in range(64)]


def test_strings_are_shortened_to_their_bounds_in_code_points() -> None:
    message = ASTRAL * 1500
    doc = history(
        reason="r" * 400,
        workflowVersionId="v" * 250,
        executionError={"name": "E" * 250, "message": message},
        nodes=[node(0, name=ASTRAL * 400, type="t" * 301,
                    runs=[run(0, id="x" * 201, error={"name": None, "message": message},
                              usage=[usage(model="m" * 201, provider="p" * 201)])])],
    )  # fmt: skip
    report, _ = bound(doc)
    assert report["truncated"] is True and report["availability"] == "partial"
    assert len(report["reason"]) == 300
    assert len(report["workflowVersionId"]) == 200
    assert report["executionError"] == {"name": "E" * 200, "message": ASTRAL * 1000}
    first = report["nodes"][0]
    assert (len(first["name"]), len(first["type"])) == (300, 300)
    assert len(first["runs"][0]["id"]) == 200
    assert first["runs"][0]["error"]["message"] == ASTRAL * 1000
    assert len(first["runs"][0]["usage"][0]["model"]) == 200


def test_a_message_at_exactly_1000_code_points_is_not_a_cut() -> None:
    report, _ = bound(history(executionError={"name": "E", "message": "m" * 1000}))
    assert report["truncated"] is False and report["availability"] == "available"


def test_byte_bound_keeps_longest_prefix_and_never_splits_a_run() -> None:
    heavy = ASTRAL * 1000  # 4000 bytes a message
    nodes = [
        node(i, runs=[run(r, id=f"n{i}-r{r}", error={"name": None, "message": heavy})
                      for r in range(5)])
        for i in range(6)
    ]  # fmt: skip
    full = history(nodes=nodes)
    report, raw = bound(full)
    assert report["truncated"] is True and report["availability"] == "partial"
    kept = report["nodes"]
    # a prefix in stored order: whole nodes, then whole runs of the last node
    assert [n["id"] for n in kept] == [f"node-{i}" for i in range(len(kept))]
    for n in kept[:-1]:
        assert len(n["runs"]) == 5
    last = kept[-1]
    assert [r["id"] for r in last["runs"]] == [
        f"n{len(kept) - 1}-r{r}" for r in range(len(last["runs"]))
    ]
    assert all(r["error"]["message"] == heavy for n in kept for r in n["runs"])
    # longest: one more run (of the last node, or the next node's first) would not fit
    one_more = run(9, id="n9-r9", error={"name": None, "message": heavy})
    one_more_bytes = json.dumps(one_more, separators=(",", ":"), ensure_ascii=False).encode()
    assert len(raw) + len(one_more_bytes) > MAX_BYTES
    assert len(raw) > MAX_BYTES - 5000


def test_byte_bound_when_pinned_ids_alone_are_too_big() -> None:
    ids = [ASTRAL * 200 + str(i) for i in range(64)]  # 64 × ~800 bytes
    report, raw = bound(history(pinning={"status": "used", "source": "execution_pin_data",
                                         "pinnedNodeIds": ids}))  # fmt: skip
    assert report["truncated"] is True
    pinned = report["pinning"]["pinnedNodeIds"]
    assert 0 < len(pinned) < 64
    assert pinned == [i[:200] for i in ids[: len(pinned)]]


def test_unavailable_and_expired_history_have_no_nodes() -> None:
    for availability in ("unavailable", "expired"):
        report, _ = bound(history(availability=availability, reason="retention", nodes=[node(0)]))
        assert report["nodes"] == []
        assert report["availability"] == availability


def test_missing_token_counts_stay_null_never_zero() -> None:
    row = usage()
    for key in ("inputTokens", "outputTokens", "totalTokens", "cachedInputTokens"):
        row.pop(key)
    report, _ = bound(history(nodes=[node(0, runs=[run(0, usage=[row])])]))
    shown = report["nodes"][0]["runs"][0]["usage"][0]
    assert shown["inputTokens"] is None and shown["totalTokens"] is None
    assert shown["reasoningTokens"] is None
    assert "modelSource" not in shown


def test_control_characters_are_replaced_per_pattern() -> None:
    doc = history(
        workflowVersionId="v\x01\x85",
        nodes=[node(0, id="a\x7fb", name="Na\x00me\n\x85",
                    runs=[run(0, error={"name": "E\x00", "message": "line1\nline2\x00"})])],
    )  # fmt: skip
    report, _ = bound(doc)
    # ids in a history exclude C0 and DEL only (C1 kept, per its pattern)
    assert report["workflowVersionId"] == "v\ufffd\x85"
    first = report["nodes"][0]
    assert first["id"] == "a\ufffdb"
    # free text: only NUL replaced
    assert first["name"] == "Na\ufffdme\n\x85"
    assert first["runs"][0]["error"] == {"name": "E\ufffd", "message": "line1\nline2\ufffd"}


def test_truncated_in_the_file_is_kept_and_partial() -> None:
    report, _ = bound(history(truncated=True))
    assert (report["truncated"], report["availability"]) == (True, "partial")
