"""Loading a snapshot file (docs/snapshot-format.md): one JSON object of record arrays, upserted by
id inside one transaction, in reference order (accounts, workspaces, instances, sync jobs,
workflows, executions). A bad file raises LoadError and changes nothing.

Readers see the records as they were before the commit or after it, never a mix; the load
takes no lock a reader waits for (row-level upserts only). After the commit the tables the
transaction wrote are analysed (service/store/planner_statistics.py), so the first plans after a
load are as good as the steady state's, autovacuum or not.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import asyncpg
import msgspec

from service.errors import LoadError
from service.store import planner_statistics as statistics
from service.store.load_inventory import (
    load_accounts,
    load_instances,
    load_sync_jobs,
    load_workflows,
    load_workspaces,
)

_ARRAYS = "accounts, workspaces, instances, syncJobs, workflows, executions"


class _Document(msgspec.Struct, forbid_unknown_fields=True):
    accounts: list[msgspec.Raw] = []
    workspaces: list[msgspec.Raw] = []
    instances: list[msgspec.Raw] = []
    syncJobs: list[msgspec.Raw] = []
    workflows: list[msgspec.Raw] = []
    executions: list[msgspec.Raw] = []


@dataclass(frozen=True)
class LoadReport:
    """How many records of each kind the file held (each inserted or updated)."""

    accounts: int = 0
    workspaces: int = 0
    memberships: int = 0
    instances: int = 0
    sync_jobs: int = 0
    workflows: int = 0
    executions: int = 0
    written: tuple[str, ...] = ()  # the tables the transaction wrote (statistics.py)
    analyzed: statistics.Analyzed = statistics.Analyzed()

    def summary(self) -> str:
        return (
            f"loaded {self.accounts} accounts, {self.workspaces} workspaces "
            f"({self.memberships} memberships), {self.instances} instances, "
            f"{self.sync_jobs} sync jobs, {self.workflows} workflows, "
            f"{self.executions} executions"
        )


def parse_document(document: bytes) -> _Document:
    try:
        return msgspec.json.decode(document, type=_Document)
    except msgspec.ValidationError as err:
        text = str(err)
        if text.startswith("Object contains unknown field"):
            name = text.split("`")[1]
            message = f"is not a snapshot array (known: {_ARRAYS})"
            raise LoadError("snapshot", name, message) from err
        if " - at `$." in text:
            name = text.rsplit("`$.", 1)[1].rstrip("`")
            raise LoadError("snapshot", name, "must be an array of record objects") from err
        raise LoadError(
            "snapshot", "", f"must be one JSON object with the arrays {_ARRAYS}"
        ) from err
    except msgspec.DecodeError as err:  # after ValidationError, its subclass
        raise LoadError("snapshot", "", f"the file is not valid JSON ({err})") from err


async def load_snapshot(
    conn: asyncpg.Connection, document: bytes, *, analyze: bool = True
) -> LoadReport:
    """Upsert every record of the snapshot in one transaction; LoadError changes nothing.

    Then ANALYZE the tables the transaction wrote, unless `analyze` is false (the caller
    then analyses `LoadReport.written` itself, e.g. to tell a failure of that step, after
    the commit, from a refused load)."""
    doc = parse_document(document)
    async with conn.transaction():
        accounts = await load_accounts(conn, doc.accounts)
        workspaces, memberships = await load_workspaces(conn, doc.workspaces, accounts)
        instances = await load_instances(conn, doc.instances, workspaces)
        sync_jobs = await load_sync_jobs(conn, doc.syncJobs, instances)
        workflows = await load_workflows(conn, doc.workflows, instances)
        executions = await _load_executions(conn, doc.executions)
        written = await statistics.tables_written(conn)
    analyzed = await statistics.analyze(conn, written) if analyze else statistics.Analyzed()
    return LoadReport(
        accounts=len(accounts),
        workspaces=len(workspaces),
        memberships=memberships,
        instances=len(instances),
        sync_jobs=sync_jobs,
        workflows=workflows,
        executions=executions,
        written=written,
        analyzed=analyzed,
    )


async def _load_executions(conn: asyncpg.Connection, items: list[msgspec.Raw]) -> int:
    """The executions step lives in service/store/load_executions.py (another area)."""
    try:
        module = importlib.import_module("service.store.load_executions")
    except ModuleNotFoundError as err:
        if err.name != "service.store.load_executions":
            raise
        if items:
            raise LoadError("executions", "", "loading executions is not available") from err
        return 0
    count: int = await module.load_executions(conn, items)
    return count
