"""Building snapshot documents for tests (the format of docs/snapshot-format.md).

Record factories return plain dicts with sensible defaults; keyword overrides replace
fields, and an override of `ABSENT` removes the field (to test absent versus null):

    snap = Snapshot()
    owner = snap.account()
    ws = snap.workspace(name="Ops", members=[member(owner)])
    inst = snap.instance(ws)
    wf = snap.workflow(inst, archived=ABSENT, nodes=[node(), node(disabled=True)])
    snap.execution(inst, workflow=wf, status="error")
    await load_snapshot(conn, snap.document())

Ids are fresh version-4 UUIDs (lowercase strings), so tests sharing one database do not
collide. Timestamps default to fixed instants in January 2025.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import msgspec

Record = dict[str, Any]


class _Absent:
    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()
"""An override that removes the field from the record."""

_counter = itertools.count(1)
T0 = "2025-01-15T09:00:00Z"


def new_id() -> str:
    return str(uuid.uuid4())


def _apply(record: Record, overrides: dict[str, Any]) -> Record:
    for key, value in overrides.items():
        if value is ABSENT:
            record.pop(key, None)
        else:
            record[key] = value
    return record


def _id_of(ref: Record | str) -> str:
    return ref if isinstance(ref, str) else str(ref["id"])


def account(**overrides: Any) -> Record:
    n = next(_counter)
    return _apply({"id": new_id(), "email": f"user{n}-{uuid.uuid4().hex[:8]}@example.test",
                   "name": f"User {n}"}, overrides)  # fmt: skip


def member(acc: Record | str, role: str = "owner") -> Record:
    return {"accountId": _id_of(acc), "role": role}


def workspace(**overrides: Any) -> Record:
    n = next(_counter)
    return _apply(
        {"id": new_id(), "name": f"Workspace {n}", "timeZone": "Europe/Berlin", "members": []},
        overrides,
    )


def sync_state(**overrides: Any) -> Record:
    return _apply(
        {"pending": False, "scope": None, "status": None, "errorCode": None, "lastAttemptAt": None},
        overrides,
    )


def instance(ws: Record | str, **overrides: Any) -> Record:
    n = next(_counter)
    return _apply(
        {
            "id": new_id(),
            "workspaceId": _id_of(ws),
            "name": f"Instance {n}",
            "status": "connected",
            "autoSyncEnabled": True,
            "workflowIntervalMinutes": 60,
            "lastSyncAt": "2025-01-15T09:30:00Z",
            "lastWorkflowSyncAt": "2025-01-15T09:30:00Z",
            "lastExecutionSyncAt": "2025-01-15T09:35:00Z",
            "historyComplete": True,
            "syncState": sync_state(),
        },
        overrides,
    )


def sync_job(inst: Record | str, **overrides: Any) -> Record:
    return _apply(
        {
            "id": new_id(),
            "instanceId": _id_of(inst),
            "scope": "executions",
            "trigger": "scheduled",
            "status": "succeeded",
            "createdAt": T0,
            "finishedAt": "2025-01-15T09:00:05Z",
            "errorCode": None,
        },
        overrides,
    )


def node(**overrides: Any) -> Record:
    n = next(_counter)
    return _apply(
        {
            "id": new_id(),
            "name": f"Node {n}",
            "type": "n8n-nodes-base.set",
            "typeVersion": 3.4,
            "disabled": False,
        },
        overrides,
    )


def workflow(inst: Record | str, **overrides: Any) -> Record:
    n = next(_counter)
    return _apply(
        {
            "id": new_id(),
            "instanceId": _id_of(inst),
            "name": f"Workflow {n}",
            "sourceId": f"src{n:06d}",
            "active": True,
            "tracked": True,
            "present": True,
            "updatedAt": "2025-01-10T08:00:00Z",
            "observedAt": "2025-01-15T09:30:00Z",
            "nodes": [node()],
        },
        overrides,
    )


def execution(inst: Record | str, workflow: Record | str | None = None, **overrides: Any) -> Record:
    """An execution of `inst`; `workflow` (a workflow record or id) sets workflowId and, from
    a record, workflowName and sourceWorkflowId."""
    n = next(_counter)
    record: Record = {
        "id": new_id(),
        "instanceId": _id_of(inst),
        "workflowId": None,
        "workflowName": f"Workflow label {n}",
        "sourceId": f"{n}",
        "sourceWorkflowId": f"srcwf{n}",
        "status": "success",
        "startedAt": "2025-01-15T09:00:00Z",
        "createdAt": "2025-01-15T08:59:59Z",
        "stoppedAt": "2025-01-15T09:00:01.500Z",
        "observedAt": "2025-01-15T09:35:00Z",
        "sourceMissing": False,
    }
    if workflow is not None:
        record["workflowId"] = _id_of(workflow)
        if isinstance(workflow, dict):
            record["workflowName"] = workflow["name"]
            record["sourceWorkflowId"] = workflow["sourceId"]
    return _apply(record, overrides)


def document(**arrays: list[Record]) -> bytes:
    """A snapshot document holding the given arrays (syncJobs, workflows, …)."""
    return msgspec.json.encode(arrays)


class Snapshot:
    """Collects records in the six arrays; each method adds a record and returns it."""

    def __init__(self) -> None:
        self.arrays: dict[str, list[Record]] = {
            "accounts": [],
            "workspaces": [],
            "instances": [],
            "syncJobs": [],
            "workflows": [],
            "executions": [],
        }

    def _add(self, array: str, record: Record) -> Record:
        self.arrays[array].append(record)
        return record

    def account(self, **overrides: Any) -> Record:
        return self._add("accounts", account(**overrides))

    def workspace(self, **overrides: Any) -> Record:
        return self._add("workspaces", workspace(**overrides))

    def instance(self, ws: Record | str, **overrides: Any) -> Record:
        return self._add("instances", instance(ws, **overrides))

    def sync_job(self, inst: Record | str, **overrides: Any) -> Record:
        return self._add("syncJobs", sync_job(inst, **overrides))

    def workflow(self, inst: Record | str, **overrides: Any) -> Record:
        return self._add("workflows", workflow(inst, **overrides))

    def execution(
        self, inst: Record | str, workflow: Record | str | None = None, **overrides: Any
    ) -> Record:
        return self._add("executions", execution(inst, workflow, **overrides))

    def document(self) -> bytes:
        return document(**{k: v for k, v in self.arrays.items() if v})
