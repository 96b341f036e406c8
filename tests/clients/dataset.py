"""The records every client test reads: one account, two granted workspaces (one in
Asia/Kathmandu, +05:45), a workspace of another account, instances, sync jobs, workflows
current and archived, and executions priced, failed and undated.

Names carry non-ASCII and astral characters so each client's JSON handling is exercised.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import asyncpg

from service.store.load_snapshot import load_snapshot
from tests.support.snapshots import Snapshot, member, node

COMPLETE_COVERAGE = {
    "state": "complete",
    "pricedComponents": 2,
    "unresolvedComponents": 0,
    "excludedComponents": 0,
    "observations": 2,
}
EXPIRED_HISTORY = {
    "schemaVersion": 1, "availability": "expired", "reason": "retention", "observedAt": None,
    "order": "unknown", "workflowVersionId": None, "pinnedData": None, "failure": None,
    "nodes": [], "truncated": False,
    "pinning": {"status": "unknown", "source": "unknown", "pinnedNodeIds": []},
}  # fmt: skip


@dataclass(frozen=True)
class Dataset:
    account_email: str
    workspace_id: str  # Asia/Kathmandu, the one most calls read
    second_workspace_id: str
    foreign_workspace_id: str  # exists, but belongs to another account
    instance_id: str
    workflow_id: str
    execution_id: str
    workspace_name: str

    @property
    def granted(self) -> list[str]:
        return [self.workspace_id, self.second_workspace_id]


def build() -> tuple[Snapshot, Dataset]:
    snap = Snapshot()
    owner = snap.account(name="Client Tester")
    stranger = snap.account()
    name = "Kathmandu ops \u2713 \U0001f680"
    ws = snap.workspace(name=name, timeZone="Asia/Kathmandu", members=[member(owner)])
    second = snap.workspace(
        name="Berlin team", timeZone="Europe/Berlin", members=[member(owner, "member")]
    )
    foreign = snap.workspace(name="Not yours", members=[member(stranger)])
    inst = snap.instance(ws, name="Production n8n")
    snap.instance(
        ws,
        name="Staging n8n",
        status="error",
        historyComplete=False,
        syncState={"pending": False, "scope": "executions", "status": "failed",
                   "errorCode": "N8N_AUTH_FAILED", "lastAttemptAt": "2025-01-15T09:40:00Z"},
    )  # fmt: skip
    snap.instance(second)
    snap.instance(foreign)
    snap.sync_job(inst)
    snap.sync_job(
        inst, status="failed", errorCode="N8N_TIMEOUT", createdAt="2025-01-15T10:00:00Z",
        finishedAt="2025-01-15T10:00:30Z",
    )  # fmt: skip
    wf = snap.workflow(
        inst, name="Orders \u2192 CRM \U0001d11e", nodes=[node(), node(disabled=True)]
    )
    snap.workflow(inst, name="Old import", archived=True, present=False)
    run = snap.execution(
        inst, wf, cost={"amount": "0.0125"}, costCoverage=COMPLETE_COVERAGE,
        history=EXPIRED_HISTORY,
    )  # fmt: skip
    snap.execution(inst, wf, status="error", startedAt="2025-01-14T23:50:00Z")
    snap.execution(inst, wf, status="crashed", cost={"amount": "0.5"})
    snap.execution(inst, None, status="waiting", startedAt=None, createdAt=None)  # undated
    return snap, Dataset(
        account_email=owner["email"],
        workspace_id=ws["id"],
        second_workspace_id=second["id"],
        foreign_workspace_id=foreign["id"],
        instance_id=inst["id"],
        workflow_id=wf["id"],
        execution_id=run["id"],
        workspace_name=name,
    )


async def _load(dsn: str, document: bytes) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await load_snapshot(conn, document)
    finally:
        await conn.close()


def load(dsn: str) -> Dataset:
    """Load a fresh dataset (fresh ids, so it never collides with other tests' rows)."""
    snap, data = build()
    asyncio.run(_load(dsn, snap.document()))
    return data
