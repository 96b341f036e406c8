"""Diagnostic history reports of demo executions: nodes, runs, errors and model usage.

A report follows the workflow's enabled nodes in stored order until the failing node, its
runs one after another inside the execution's window (the last one, the failing run of a
failed execution, starts before stoppedAt), observed when the execution was. Chat
model nodes get one run per model call, carrying that call's usage row, so the history's
token counts are the ones the execution's reference cost was computed from. Loop nodes run
once per item; one in a while a batch is big enough (150 items) to pass the 128-runs bound,
and long workflows pass the 64-nodes bound, so the service's truncation shows.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from service.demo.cast import (
    CHAT_MODEL_TYPES,
    CRASH_ERRORS,
    ERRORS,
    GENERIC_ERROR,
    HTTP,
    MANUAL,
    STICKY,
    TRIGGER_TYPES,
)
from service.demo.deterministic import Json, iso
from service.demo.usage import Call

LOOP_NODES = ("Loop over leads", "Clearbit lookup", "Update contact", "Wait 1s (rate limit)")
MAX_EXECUTED = 90  # nodes of the generated 1000-node workflow that a report follows
_CLOUDFLARE_PAGE = (
    '502 - "<!DOCTYPE html>\n<html lang=\\"en-US\\">\n<head><title>enrichment-api.example.com'
    ' | 502: Bad gateway</title></head>\n<body>\n<div id=\\"cf-wrapper\\">\n<h1>Bad gateway'
    "</h1>\n<p>Error code 502</p>\n"
    + "<p>The web server reported a bad gateway error. Please try again in a few minutes.</p>\n"
    * 14
    + '<p>Cloudflare Ray ID: 8f2c1e0b9a7d4c21 • Your IP: 203.0.113.7</p>\n</div></body></html>"'
)


@dataclass(frozen=True)
class Outcome:
    status: str  # the execution's status
    started: datetime
    total_ms: int  # stoppedAt - startedAt: the node runs fit in it
    observed: datetime
    old: bool  # collected by an older collector: fewer facts recorded
    big_batch: bool


def unavailable(observed: datetime, expired: bool) -> Json:
    reason = (
        "n8n pruned this execution's data (EXECUTIONS_DATA_MAX_AGE) before it was collected."
        if expired
        else "n8n did not save data for this execution (EXECUTIONS_DATA_SAVE_ON_SUCCESS=none)."
    )
    return {
        "schemaVersion": 1,
        "availability": "expired" if expired else "unavailable",
        "reason": reason,
        "observedAt": iso(observed),
        "order": "unknown",
        "workflowVersionId": None,
        "pinnedData": None,
        "pinning": {"status": "unknown", "source": "unknown", "pinnedNodeIds": []},
        "failure": None,
        "nodes": [],
        "truncated": False,
    }


def _error_for(rng: random.Random, node_type: str) -> tuple[str | None, str]:
    if node_type == HTTP[0] and rng.random() < 0.25:
        return ("NodeApiError", _CLOUDFLARE_PAGE)  # longer than the 1000 code-point bound
    return rng.choice(ERRORS.get(node_type, (GENERIC_ERROR,)))


def _run_counts(
    nodes: list[Json], calls: list[Call], outcome: Outcome, rng: random.Random
) -> list[int]:
    items = 150 if outcome.big_batch else rng.randint(3, 40)
    counts = []
    for node in nodes:
        if node["type"] in CHAT_MODEL_TYPES:
            counts.append(len(calls))
        elif node["name"] == LOOP_NODES[0]:
            counts.append(items + 1)
        elif node["name"] in LOOP_NODES:
            counts.append(items)
        else:
            counts.append(1)
    return counts


def _failing_index(rng: random.Random, nodes: list[Json], counts: list[int]) -> int:
    candidates = [i for i, n in enumerate(nodes) if n["type"] not in TRIGGER_TYPES and counts[i]]
    preferred = [i for i in candidates if nodes[i]["type"] in ERRORS]
    return rng.choice(preferred or candidates or [len(nodes) - 1])


def report(
    rng: random.Random,
    workflow_nodes: list[Json],
    calls: list[Call],
    outcome: Outcome,
    version_id: str | None,
) -> Json:
    """The untruncated history report of one execution that has run."""
    nodes = [n for n in workflow_nodes if not n["disabled"] and n["type"] != STICKY[0]]
    nodes = nodes[:MAX_EXECUTED]
    counts = _run_counts(nodes, calls, outcome, rng)
    stop = len(nodes) - 1
    failure_at = None
    if outcome.status == "error":
        failure_at = stop = _failing_index(rng, nodes, counts)
        # A failing model call reports no usage: it is a run of its own after the others.
        counts[stop] += 1 if nodes[stop]["type"] in CHAT_MODEL_TYPES else 0
    elif outcome.status in ("crashed", "canceled"):
        stop = rng.randrange(1, len(nodes)) if len(nodes) > 1 else 0
    pins = _pins(rng, nodes, outcome)
    durations = iter(_durations(rng, outcome.total_ms, sum(counts[: stop + 1])))
    clock = outcome.started
    error: tuple[str | None, str] | None = None
    out_nodes = []
    for i, node in enumerate(nodes[: stop + 1]):
        if not counts[i]:
            continue  # a model that was never called has no run
        runs = []
        for r in range(counts[i]):
            ms = next(durations)
            last = i == stop and r == counts[i] - 1
            run: Json = {
                "id": f"{node['id']}:{r}",
                "status": "success",
                "startedAt": iso(clock),
                "durationMs": ms,
                "pinned": True if node["id"] in pins else None,
                "error": None,
                "usage": [calls[r].row]
                if node["type"] in CHAT_MODEL_TYPES and r < len(calls)
                else [],
            }
            if last and outcome.status != "success":
                run["status"] = outcome.status
                if failure_at is not None:
                    error = _error_for(rng, node["type"])
                    run["error"] = {"name": error[0], "message": error[1]}
                    run["usage"] = []
            runs.append(run)
            clock += timedelta(milliseconds=ms)
        out_nodes.append(
            {
                "id": node["id"],
                "name": node["name"],
                "type": node["type"],
                "provenance": "unknown" if outcome.old else "recorded_run",
                "pinned": None if outcome.old else node["id"] in pins,
                "runs": runs,
            }
        )
    if outcome.status == "error" and not outcome.old and rng.random() < 0.3:
        # The execution's workflow snapshot also names the nodes that never ran.
        out_nodes += [
            {
                "id": n["id"],
                "name": n["name"],
                "type": n["type"],
                "provenance": "execution_snapshot",
                "pinned": False,
                "runs": [],
            }
            for n in nodes[stop + 1 : stop + 4]
        ]
    return _envelope(outcome, out_nodes, pins, failure_at, nodes, error, version_id, rng)


def _durations(rng: random.Random, total_ms: int, runs: int) -> list[int]:
    """Whole-millisecond durations of `runs` runs one after another that fit in the
    execution's `total_ms` (stoppedAt - startedAt): their sum is at most `total_ms`, and the
    last run (the failing one, if any) lasts at least 1 ms, so it starts before stoppedAt."""
    if runs == 0:
        return []
    weights = [rng.uniform(0.3, 1.7) for _ in range(runs)]
    share = max(total_ms - 1, 0) / sum(weights)
    out = [int(w * share) for w in weights]
    out[-1] += 1 if total_ms >= 1 else 0
    return out


def _pins(rng: random.Random, nodes: list[Json], outcome: Outcome) -> list[str]:
    """Manual test runs often replay pinned trigger data."""
    manual = nodes and nodes[0]["type"] == MANUAL[0]
    if outcome.old or not manual or rng.random() < 0.5:
        return []
    return [n["id"] for n in nodes[: 1 + rng.randint(0, 1)]]


def _envelope(
    outcome: Outcome,
    out_nodes: list[Json],
    pins: list[str],
    failure_at: int | None,
    nodes: list[Json],
    error: tuple[str | None, str] | None,
    version_id: str | None,
    rng: random.Random,
) -> Json:
    doc: Json = {
        "schemaVersion": 1,
        "availability": "available",
        "reason": None,
        "observedAt": iso(outcome.observed),
        "order": "unknown" if outcome.old else "recorded",
        "workflowVersionId": None if outcome.old else version_id,
        "pinnedData": None if outcome.old else bool(pins),
        "pinning": _pinning(outcome, pins),
        "failure": None,
        "nodes": out_nodes,
        "truncated": False,
    }
    if failure_at is not None:
        node_id = nodes[failure_at]["id"]
        failing = next(n for n in out_nodes if n["id"] == node_id)
        doc["failure"] = {"nodeId": node_id, "runId": failing["runs"][-1]["id"]}
    if error is not None:
        doc["executionError"] = {"name": error[0], "message": error[1]}
    elif outcome.status == "crashed":
        name, message = rng.choice(CRASH_ERRORS)
        doc["executionError"] = {"name": name, "message": message}
    elif not outcome.old:
        doc["executionError"] = None
    return doc


def _pinning(outcome: Outcome, pins: list[str]) -> Json:
    if outcome.old:
        return {"status": "unknown", "source": "unknown", "pinnedNodeIds": []}
    if pins:
        return {"status": "used", "source": "execution_pin_data", "pinnedNodeIds": pins}
    return {"status": "not_used", "source": "none", "pinnedNodeIds": []}
