"""Loading the inventory arrays of a snapshot: accounts, workspaces with members, instances,
sync jobs and workflows (docs/snapshot-format.md).

Each step decodes its array (msgspec validates types, enums and bounds), sanitises control
characters in named strings (so stored, sorted and returned values agree), checks references
against the file and the database, and upserts by id. It runs inside the caller's
transaction: a LoadError anywhere leaves the database unchanged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Literal
from uuid import UUID

import asyncpg
import msgspec

from service.errors import LoadError, ValidationError
from service.passwords import hash_password
from service.rules.fields import Instant, NonEmpty
from service.rules.inventory import (
    MAX_NODES,
    NODE_STRING_LIMITS,
    InventoryNode,
    bound_inventory,
)
from service.rules.shaping import resolve_zone, sanitize_name, shorten
from service.store.decoding import check_id, decode_records, label, unique_ids

# No spaces or control characters (PostgreSQL text cannot hold NUL; a login has no C0/C1).
Email = Annotated[
    str,
    msgspec.Meta(
        min_length=3,
        max_length=320,
        pattern=r"^[^\s@\x00-\x1f\x7f-\x9f]+@[^\s@\x00-\x1f\x7f-\x9f]+\Z",
    ),
]
SyncScope = Literal["all", "workflows", "executions", "metadata"]
SyncStatus = Literal["queued", "running", "succeeded", "failed"]
ErrorCode = Literal[
    "N8N_AUTH_FAILED",
    "N8N_SCOPE_DENIED",
    "N8N_RATE_LIMITED",
    "N8N_UNAVAILABLE",
    "N8N_RESPONSE_INVALID",
    "N8N_DATA_LIMIT",
    "N8N_TARGET_BLOCKED",
    "N8N_TIMEOUT",
    "N8N_INSTANCE_CHANGED",
    "N8N_SYNC_CANCELLED",
    "N8N_NOT_FOUND",
    "N8N_STORAGE_INVALID",
]
_UNSET = msgspec.UNSET


class Record(msgspec.Struct, forbid_unknown_fields=True):
    """Snapshot records reject unknown fields: a misspelt optional field would otherwise be
    silently read as absent."""


class AccountIn(Record):
    id: UUID
    email: Email
    name: NonEmpty
    password: Annotated[str, msgspec.Meta(min_length=1)] | msgspec.UnsetType = _UNSET


class MemberIn(Record):
    accountId: UUID
    role: Literal["owner", "admin", "member"]


class WorkspaceIn(Record):
    id: UUID
    name: NonEmpty
    timeZone: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    readGeneration: Annotated[int, msgspec.Meta(ge=1, le=2**31 - 1)] | msgspec.UnsetType = _UNSET
    executionPollIntervalSeconds: (
        Annotated[int, msgspec.Meta(ge=1, le=86400)] | msgspec.UnsetType
    ) = _UNSET
    members: list[MemberIn] | msgspec.UnsetType = _UNSET


class SyncStateIn(Record):
    pending: bool
    scope: SyncScope | None
    status: SyncStatus | None
    errorCode: ErrorCode | None
    lastAttemptAt: Instant | None


class InstanceIn(Record):
    id: UUID
    workspaceId: UUID
    name: NonEmpty
    status: Literal["pending", "connected", "error"]
    autoSyncEnabled: bool
    workflowIntervalMinutes: Annotated[int, msgspec.Meta(ge=1, le=10080)]
    lastSyncAt: Instant | None
    lastWorkflowSyncAt: Instant | None
    lastExecutionSyncAt: Instant | None
    historyComplete: bool
    syncState: SyncStateIn
    workflowInventoryTruncated: bool = False


class SyncJobIn(Record):
    id: UUID
    instanceId: UUID
    scope: SyncScope
    trigger: Literal["initial", "manual", "scheduled"]
    status: SyncStatus
    createdAt: Instant
    finishedAt: Instant | None
    errorCode: ErrorCode | None


class NodeIn(msgspec.Struct):
    """A node as n8n exports it: other keys (parameters, credentials, position…) are
    dropped here and never stored; `disabled` absent means false, `typeVersion` absent null."""

    id: str
    name: str
    type: str
    typeVersion: int | float | None = None
    disabled: bool = False


class WorkflowIn(Record):
    id: UUID
    instanceId: UUID
    name: NonEmpty
    sourceId: NonEmpty
    active: bool
    tracked: bool
    present: bool
    updatedAt: Instant | None
    observedAt: Instant
    nodes: list[NodeIn]
    archived: bool | None | msgspec.UnsetType = _UNSET
    definitionAvailable: bool | msgspec.UnsetType = _UNSET
    definitionRemovedAt: Instant | None | msgspec.UnsetType = _UNSET


def _given(value: object) -> object:
    return None if value is _UNSET else value


# --- accounts ---------------------------------------------------------------------------

_UPSERT_ACCOUNT = """
    INSERT INTO accounts (id, email, name, password_hash) VALUES ($1, $2, $3, $4)
    ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, name = EXCLUDED.name,
        password_hash = coalesce(EXCLUDED.password_hash, accounts.password_hash)
"""


async def load_accounts(conn: asyncpg.Connection, items: Sequence[msgspec.Raw]) -> set[UUID]:
    """Upsert accounts; return their ids. An absent password keeps the stored hash."""
    accounts = decode_records(items, AccountIn, "accounts")
    for i, acc in enumerate(accounts):
        check_id(acc.id, label("accounts", i, str(acc.id)), "id")
    unique_ids([a.id for a in accounts], "accounts")
    seen: dict[str, int] = {}
    for i, acc in enumerate(accounts):
        key = acc.email.lower()
        if key in seen:
            raise LoadError(
                label("accounts", i, str(acc.id)), "email", f"same email as accounts[{seen[key]}]"
            )
        seen[key] = i
    taken = await conn.fetch(
        "SELECT id, lower(email) AS email FROM accounts WHERE lower(email) = ANY($1::text[])",
        list(seen),
    )
    for row in taken:
        index = seen[row["email"]]
        if accounts[index].id != row["id"]:
            raise LoadError(
                label("accounts", index, str(accounts[index].id)),
                "email",
                "is already used by another account",
            )
    rows = []
    for acc in accounts:
        digest = None
        if acc.password is not _UNSET:
            # scrypt takes tens of milliseconds and holds no lock: keep the loop free.
            digest = await asyncio.to_thread(hash_password, str(acc.password))
        rows.append((acc.id, acc.email, sanitize_name(acc.name), digest))
    await conn.executemany(_UPSERT_ACCOUNT, rows)
    return {acc.id for acc in accounts}


# --- workspaces and memberships -----------------------------------------------------------

_UPSERT_WORKSPACE = """
    INSERT INTO workspaces (id, name, time_zone, read_generation, execution_poll_interval_seconds)
    VALUES ($1, $2, $3, coalesce($4::integer, 1), coalesce($5::integer, 300))
    ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, time_zone = EXCLUDED.time_zone,
        read_generation = coalesce($4::integer, workspaces.read_generation),
        execution_poll_interval_seconds =
            coalesce($5::integer, workspaces.execution_poll_interval_seconds)
"""


async def load_workspaces(
    conn: asyncpg.Connection, items: Sequence[msgspec.Raw], file_accounts: set[UUID]
) -> tuple[set[UUID], int]:
    """Upsert workspaces; a workspace's `members`, when given, replace its memberships.
    Return the workspace ids and the number of memberships written."""
    workspaces = decode_records(items, WorkspaceIn, "workspaces")
    unique_ids([w.id for w in workspaces], "workspaces")
    referenced = {m.accountId for w in workspaces if w.members is not _UNSET for m in w.members}
    known = file_accounts | await _existing(conn, "accounts", referenced - file_accounts)
    rows, members = [], []
    for i, ws in enumerate(workspaces):
        where = label("workspaces", i, str(ws.id))
        check_id(ws.id, where, "id")
        try:
            resolve_zone(ws.timeZone)
        except ValidationError as err:
            raise LoadError(where, "timeZone", f"{ws.timeZone!r} is not an IANA time zone") from err
        rows.append(
            (
                ws.id,
                sanitize_name(ws.name),
                ws.timeZone,
                _given(ws.readGeneration),
                _given(ws.executionPollIntervalSeconds),
            )
        )
        if ws.members is _UNSET:
            continue
        seen: set[UUID] = set()
        for j, member in enumerate(ws.members):
            field = f"members[{j}].accountId"
            if member.accountId in seen:
                raise LoadError(where, field, "the account is listed twice")
            if member.accountId not in known:
                raise LoadError(where, field, _missing("account", member.accountId))
            seen.add(member.accountId)
            members.append((member.accountId, ws.id, member.role))
    await conn.executemany(_UPSERT_WORKSPACE, rows)
    replaced = [ws.id for ws in workspaces if ws.members is not _UNSET]
    if replaced:
        await conn.execute("DELETE FROM memberships WHERE workspace_id = ANY($1::uuid[])", replaced)
        await conn.executemany(
            "INSERT INTO memberships (account_id, workspace_id, role) VALUES ($1, $2, $3)", members
        )
    return {ws.id for ws in workspaces}, len(members)


# --- instances and sync jobs --------------------------------------------------------------

_UPSERT_INSTANCE = """
    INSERT INTO instances (id, workspace_id, name, status, auto_sync_enabled,
        workflow_interval_minutes, last_sync_at, last_workflow_sync_at, last_execution_sync_at,
        history_complete, workflow_inventory_truncated, sync_pending, sync_scope, sync_status,
        sync_error_code, sync_last_attempt_at)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
    ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, status = EXCLUDED.status,
        auto_sync_enabled = EXCLUDED.auto_sync_enabled,
        workflow_interval_minutes = EXCLUDED.workflow_interval_minutes,
        last_sync_at = EXCLUDED.last_sync_at,
        last_workflow_sync_at = EXCLUDED.last_workflow_sync_at,
        last_execution_sync_at = EXCLUDED.last_execution_sync_at,
        history_complete = EXCLUDED.history_complete,
        workflow_inventory_truncated = EXCLUDED.workflow_inventory_truncated,
        sync_pending = EXCLUDED.sync_pending, sync_scope = EXCLUDED.sync_scope,
        sync_status = EXCLUDED.sync_status, sync_error_code = EXCLUDED.sync_error_code,
        sync_last_attempt_at = EXCLUDED.sync_last_attempt_at
"""


async def load_instances(
    conn: asyncpg.Connection, items: Sequence[msgspec.Raw], file_workspaces: set[UUID]
) -> dict[UUID, UUID]:
    """Upsert instances; return each loaded instance's workspace id."""
    instances = decode_records(items, InstanceIn, "instances")
    unique_ids([x.id for x in instances], "instances")
    referenced = {x.workspaceId for x in instances} - file_workspaces
    known = file_workspaces | await _existing(conn, "workspaces", referenced)
    stored = await _owners(conn, "instances", "workspace_id", {x.id for x in instances})
    rows, owners = [], {}
    for i, inst in enumerate(instances):
        where = label("instances", i, str(inst.id))
        check_id(inst.id, where, "id")
        if inst.workspaceId not in known:
            raise LoadError(where, "workspaceId", _missing("workspace", inst.workspaceId))
        if stored.get(inst.id, inst.workspaceId) != inst.workspaceId:
            raise LoadError(where, "workspaceId", "an instance cannot move to another workspace")
        state = inst.syncState
        rows.append(
            (
                inst.id,
                inst.workspaceId,
                sanitize_name(inst.name),
                inst.status,
                inst.autoSyncEnabled,
                inst.workflowIntervalMinutes,
                inst.lastSyncAt,
                inst.lastWorkflowSyncAt,
                inst.lastExecutionSyncAt,
                inst.historyComplete,
                inst.workflowInventoryTruncated,
                state.pending,
                state.scope,
                state.status,
                state.errorCode,
                state.lastAttemptAt,
            )
        )
        owners[inst.id] = inst.workspaceId
    await conn.executemany(_UPSERT_INSTANCE, rows)
    return owners


_UPSERT_SYNC_JOB = """
    INSERT INTO sync_jobs (id, instance_id, scope, trigger, status, created_at, finished_at,
        error_code)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
    ON CONFLICT (id) DO UPDATE SET instance_id = EXCLUDED.instance_id, scope = EXCLUDED.scope,
        trigger = EXCLUDED.trigger, status = EXCLUDED.status, created_at = EXCLUDED.created_at,
        finished_at = EXCLUDED.finished_at, error_code = EXCLUDED.error_code
"""


async def load_sync_jobs(
    conn: asyncpg.Connection, items: Sequence[msgspec.Raw], file_instances: dict[UUID, UUID]
) -> int:
    jobs = decode_records(items, SyncJobIn, "syncJobs")
    unique_ids([j.id for j in jobs], "syncJobs")
    known = await instance_workspaces(conn, {j.instanceId for j in jobs}, file_instances)
    rows = []
    for i, job in enumerate(jobs):
        where = label("syncJobs", i, str(job.id))
        check_id(job.id, where, "id")
        if job.instanceId not in known:
            raise LoadError(where, "instanceId", _missing("instance", job.instanceId))
        rows.append(
            (
                job.id,
                job.instanceId,
                job.scope,
                job.trigger,
                job.status,
                job.createdAt,
                job.finishedAt,
                job.errorCode,
            )
        )
    await conn.executemany(_UPSERT_SYNC_JOB, rows)
    return len(rows)


# --- workflows ----------------------------------------------------------------------------

_UPSERT_WORKFLOW = """
    INSERT INTO workflows (id, workspace_id, instance_id, name, source_id, active, tracked,
        present, archived_known, archived, definition_available, definition_removed_known,
        definition_removed_at, updated_at, observed_at, node_count, nodes, nodes_inventory,
        nodes_truncated)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
        $17::text::jsonb, $18, $19)
    ON CONFLICT (id) DO UPDATE SET instance_id = EXCLUDED.instance_id, name = EXCLUDED.name,
        source_id = EXCLUDED.source_id, active = EXCLUDED.active, tracked = EXCLUDED.tracked,
        present = EXCLUDED.present, archived_known = EXCLUDED.archived_known,
        archived = EXCLUDED.archived, definition_available = EXCLUDED.definition_available,
        definition_removed_known = EXCLUDED.definition_removed_known,
        definition_removed_at = EXCLUDED.definition_removed_at,
        updated_at = EXCLUDED.updated_at, observed_at = EXCLUDED.observed_at,
        node_count = EXCLUDED.node_count, nodes = EXCLUDED.nodes,
        nodes_inventory = EXCLUDED.nodes_inventory, nodes_truncated = EXCLUDED.nodes_truncated
"""
_encode = msgspec.json.Encoder().encode


def clean_nodes(nodes: Sequence[NodeIn], where: str) -> list[InventoryNode]:
    """Sanitised nodes in stored order; strings past their output bound are shortened
    silently (docs/reading-rules.md); an empty string or a non-finite version is a LoadError."""
    if len(nodes) > MAX_NODES:
        raise LoadError(
            where, "nodes", f"a workflow has at most {MAX_NODES} nodes, not {len(nodes)}"
        )
    cleaned = []
    for k, node in enumerate(nodes):
        values = {}
        for field, limit in NODE_STRING_LIMITS.items():
            text = getattr(node, field)
            if not text:
                raise LoadError(where, f"nodes[{k}].{field}", "must not be empty")
            values[field] = shorten(sanitize_name(text), limit)[0]
        cleaned.append(
            InventoryNode(
                id=values["id"],
                name=values["name"],
                type=values["type"],
                typeVersion=node.typeVersion,
                disabled=node.disabled,
            )
        )
    return cleaned


async def load_workflows(
    conn: asyncpg.Connection, items: Sequence[msgspec.Raw], file_instances: dict[UUID, UUID]
) -> int:
    workflows = decode_records(items, WorkflowIn, "workflows")
    unique_ids([w.id for w in workflows], "workflows")
    owners = await instance_workspaces(conn, {w.instanceId for w in workflows}, file_instances)
    stored = await _owners(conn, "workflows", "workspace_id", {w.id for w in workflows})
    rows = []
    for i, wf in enumerate(workflows):
        where = label("workflows", i, str(wf.id))
        check_id(wf.id, where, "id")
        workspace = owners.get(wf.instanceId)
        if workspace is None:
            raise LoadError(where, "instanceId", _missing("instance", wf.instanceId))
        if stored.get(wf.id, workspace) != workspace:
            raise LoadError(where, "instanceId", "a workflow cannot move to another workspace")
        nodes = clean_nodes(wf.nodes, where)
        inventory, truncated = bound_inventory(nodes)
        rows.append(
            (
                wf.id,
                workspace,
                wf.instanceId,
                sanitize_name(wf.name),
                sanitize_name(wf.sourceId),
                wf.active,
                wf.tracked,
                wf.present,
                wf.archived is not _UNSET,
                _given(wf.archived),
                _given(wf.definitionAvailable),
                wf.definitionRemovedAt is not _UNSET,
                _given(wf.definitionRemovedAt),
                wf.updatedAt,
                wf.observedAt,
                len(nodes),
                _encode(nodes).decode("utf-8"),
                inventory,
                truncated,
            )
        )
    await conn.executemany(_UPSERT_WORKFLOW, rows)
    return len(rows)


# --- references ---------------------------------------------------------------------------


def _missing(kind: str, record_id: UUID) -> str:
    return f"no {kind} {record_id} in the file or the database"


_TABLES = {"accounts", "workspaces", "instances", "workflows"}


async def _existing(conn: asyncpg.Connection, table: str, ids: set[UUID]) -> set[UUID]:
    if not ids:
        return set()
    assert table in _TABLES
    rows = await conn.fetch(f"SELECT id FROM {table} WHERE id = ANY($1::uuid[])", list(ids))
    return {row["id"] for row in rows}


async def _owners(
    conn: asyncpg.Connection, table: str, column: str, ids: set[UUID]
) -> dict[UUID, UUID]:
    if not ids:
        return {}
    assert table in _TABLES and column in {"workspace_id", "instance_id"}
    rows = await conn.fetch(
        f"SELECT id, {column} AS owner FROM {table} WHERE id = ANY($1::uuid[])", list(ids)
    )
    return {row["id"]: row["owner"] for row in rows}


async def instance_workspaces(
    conn: asyncpg.Connection, ids: set[UUID], file_instances: dict[UUID, UUID]
) -> dict[UUID, UUID]:
    """instance id → workspace id for the given instances, from the file or the database."""
    found = {i: file_instances[i] for i in ids if i in file_instances}
    found.update(await _owners(conn, "instances", "workspace_id", ids - found.keys()))
    return found
