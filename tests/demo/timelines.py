"""The timeline rules demo data must keep, as a checker over snapshot records.

What a user reading the demo would take for a contradiction:

- an execution's instants are in order: createdAt <= startedAt <= stoppedAt <= observedAt,
  and none of them (nor any node run) after the row's observedAt or the snapshot's `now`;
- its node runs lie inside its window: each starts at or after startedAt and ends (start +
  durationMs) at or before stoppedAt; in a recorded order each starts after the previous
  one ended, so their durations add up to at most the execution's; the failing run starts
  before stoppedAt;
- a history report is not observed before the runs it reports, nor after its row;
- a workflow is not updated or removed after it was observed; a sync job does not finish
  before it was created.

`problems` returns one readable line per broken rule (empty when all hold).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any


def _at(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def _order(
    what: str, pairs: Iterable[tuple[str, datetime | None, str, datetime | None]]
) -> list[str]:
    out = []
    for a_name, a, b_name, b in pairs:
        if a is not None and b is not None and a > b:
            out.append(f"{what}: {a_name} {a.isoformat()} is after {b_name} {b.isoformat()}")
    return out


def execution_problems(row: dict[str, Any], now: datetime | None = None) -> list[str]:
    """The broken rules of one execution (a snapshot record or a get_execution answer)."""
    what = f"execution {row['id']}"
    created, started = _at(row.get("createdAt")), _at(row.get("startedAt"))
    stopped, observed = _at(row.get("stoppedAt")), _at(row["observedAt"])
    out = _order(what, [
        ("createdAt", created, "startedAt", started),
        ("startedAt", started, "stoppedAt", stopped),
        ("createdAt", created, "observedAt", observed),
        ("startedAt", started, "observedAt", observed),
        ("stoppedAt", stopped, "observedAt", observed),
        ("observedAt", observed, "now", now),
    ])  # fmt: skip
    if "durationMs" in row and started is not None and stopped is not None:
        expected = (stopped - started) // timedelta(milliseconds=1)
        if row["durationMs"] != expected:
            out.append(f"{what}: durationMs {row['durationMs']} is not stoppedAt - startedAt")
    history = row.get("history")
    if history:
        out += _history_problems(what, history, started, stopped, observed)
    return out


def _history_problems(
    what: str,
    history: dict[str, Any],
    started: datetime | None,
    stopped: datetime | None,
    observed: datetime | None,
) -> list[str]:
    seen = _at(history.get("observedAt"))
    out = _order(what, [("history observedAt", seen, "observedAt", observed)])
    failing = (history.get("failure") or {}).get("runId")
    previous_end: datetime | None = None
    total = timedelta(0)
    for node in history["nodes"]:
        for run in node["runs"]:
            start = _at(run["startedAt"])
            if start is None:
                continue
            ms = timedelta(milliseconds=run["durationMs"] or 0)
            end = start + ms
            total += ms
            label = f"{what} run {run['id']}"
            out += _order(label, [
                ("execution startedAt", started, "its start", start),
                ("its end", end, "stoppedAt", stopped),
                ("its end", end, "history observedAt", seen),
            ])  # fmt: skip
            if history.get("order") == "recorded":
                out += _order(label, [("the previous run's end", previous_end, "its start", start)])
            previous_end = end
            if run["id"] == failing and stopped is not None and not start < stopped:
                out.append(f"{label}: the failing run starts at or after stoppedAt")
    if started is not None and stopped is not None and total > stopped - started:
        out.append(f"{what}: node runs last {total}, longer than the execution")
    return out


def problems(snapshot: dict[str, Any], now: datetime) -> list[str]:
    """Every broken rule of a snapshot document whose times are relative to `now`."""
    out: list[str] = []
    for row in snapshot["executions"]:
        out += execution_problems(row, now)
    for wf in snapshot.get("workflows", []):
        what = f"workflow {wf['id']}"
        observed = _at(wf["observedAt"])
        out += _order(what, [
            ("updatedAt", _at(wf.get("updatedAt")), "observedAt", observed),
            ("definitionRemovedAt", _at(wf.get("definitionRemovedAt")), "observedAt", observed),
            ("observedAt", observed, "now", now),
        ])  # fmt: skip
    for job in snapshot.get("syncJobs", []):
        created, finished = _at(job["createdAt"]), _at(job.get("finishedAt"))
        out += _order(f"sync job {job['id']}", [
            ("createdAt", created, "finishedAt", finished),
            ("finishedAt", finished, "now", now),
        ])  # fmt: skip
    return out
