"""The read statements of executions: the scope of a call, a page, one execution, and the
first page read together with the caller's approval.

Order is coalesce(startedAt, createdAt, observedAt) descending, then id descending: the
generated column `sort_at`, read by keyset on (sort_at, id) with the executions_* indexes.
Every statement here is text of this module (the approval through `approval_state`,
migration 0021); each filter adds a constant condition, never text from the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any
from uuid import UUID

import asyncpg

from service.store.plans import as_function
from service.store.reads.coverage import FIRST_OBSERVED_SQL, INSTANCE_SIDE_SQL


def utc_text_sql(column: str) -> str:
    """SQL writing a timestamptz as shaping.format_instant does (UTC, `Z`, no fraction for
    whole seconds, else milliseconds or microseconds as needed). Rows are shaped on the hot
    path of every list: PostgreSQL's to_char costs a fraction of decoding a datetime and
    formatting it in Python. One to_char a value, its pattern picked by comparing the value
    with itself truncated: less PostgreSQL CPU than computing the microseconds three times
    and padding them."""
    utc = f"({column}) AT TIME ZONE 'UTC'"

    def text(fraction: str) -> str:
        return f"""to_char({utc}, 'YYYY-MM-DD"T"HH24:MI:SS{fraction}"Z"')"""

    return (
        f"CASE WHEN {column} = date_trunc('second', {column}) THEN {text('')}"
        f" WHEN {column} = date_trunc('milliseconds', {column}) THEN {text('.MS')}"
        f" ELSE {text('.US')} END"
    )


# durationMs (docs/reading-rules.md): whole milliseconds rounded down, null when negative or
# missing.
_DURATION = (
    "CASE WHEN e.stopped_at >= e.started_at"
    " THEN floor(extract(epoch FROM e.stopped_at - e.started_at) * 1000)::bigint END"
)
# The row's place in the keyset order, as the cursor holds it: microseconds since the Unix
# epoch (exact: extract gives a numeric). Only the last row's is kept (the next cursor), but
# every row's is read to order the first page; a timestamptz decoded by asyncpg makes a
# datetime plus a timedelta a value, where an int8 makes one int.
_SORT_US = "(extract(epoch FROM e.sort_at) * 1000000)::int8"
_EXECUTION_COLUMNS = f"""
    e.id, e.instance_id, e.workflow_id, e.workflow_name, e.source_id, e.source_workflow_id,
    e.status, {utc_text_sql("e.started_at")} AS started_at,
    {utc_text_sql("e.created_at")} AS created_at, {utc_text_sql("e.stopped_at")} AS stopped_at,
    {utc_text_sql("e.observed_at")} AS observed_at, {_DURATION} AS duration_ms,
    e.source_missing, {_SORT_US} AS sort_us, e.cost_state, e.cost_amount, e.cc_state,
    e.cc_priced, e.cc_unresolved, e.cc_excluded, e.cc_observations, e.cc_missing_mapping"""
# What the `failed` branches read (the outer statement shapes the merged rows).
_STORED_COLUMNS = """
    e.id, e.instance_id, e.workflow_id, e.workflow_name, e.source_id, e.source_workflow_id,
    e.status, e.started_at, e.created_at, e.stopped_at, e.observed_at, e.source_missing,
    e.sort_at, e.cost_state, e.cost_amount, e.cc_state, e.cc_priced, e.cc_unresolved,
    e.cc_excluded, e.cc_observations, e.cc_missing_mapping"""
_ROW_COLUMNS = f"{_EXECUTION_COLUMNS}, i.name AS instance_name"
# The names of `_ROW_COLUMNS`, in order. Every statement here that reads execution rows (a
# page, the first page, one execution) returns them first, so the tool unpacks a row by
# position (service/tools/executions.py shape_row): a name lookup of an asyncpg Record for
# each column of each row was a large part of shaping a page.
# tests/store/test_execution_columns.py holds each statement to this order.
ROW_COLUMNS = (
    "id", "instance_id", "workflow_id", "workflow_name", "source_id", "source_workflow_id",
    "status", "started_at", "created_at", "stopped_at", "observed_at", "duration_ms",
    "source_missing", "sort_us", "cost_state", "cost_amount", "cc_state", "cc_priced",
    "cc_unresolved", "cc_excluded", "cc_observations", "cc_missing_mapping", "instance_name",
)  # fmt: skip

# Each filter adds a constant condition (never text from the request): a statement per
# filter combination, so every prepared plan can use the matching index for the keyset.
_PAGE_CONDITIONS = {
    "instance": "e.instance_id = ${}",
    # With a workflow filter, the workflow's (…, status, sort_at, id) index must lead: a
    # workflow lies in one instance, so the instance test only drops rows of a workflow that
    # moved; written so that no index can serve it (measured: a small workflow in a large
    # instance otherwise walked 137 000 of the instance's error rows for an empty page).
    "instance_check": "(e.instance_id = ${}) IS TRUE",
    "workflow": "e.workflow_id = ${}",
    "status": "e.status = ${}",
    "window": "e.dated AND e.sort_at >= ${} AND e.sort_at <= ${}",
    "after": "(e.sort_at, e.id) < (${}, ${}::uuid)",
}
# `failed` is two statuses. A btree cannot return `status IN (…)` in (sort_at, id) order, so
# the statement reads each status in order from its own (…, status, sort_at, id) index and
# merges the two short lists: deep pages and rare statuses cost what common ones do.
FAILED = ("error", "crashed")
_ORDER = "ORDER BY e.sort_at DESC, e.id DESC"


def page_query(
    filters: dict[str, tuple[Any, ...]], rows: int, first: int = 2
) -> tuple[str, list[Any]]:
    """The page statement for the filters present, reading at most `rows` rows, and its
    arguments ($1 is the workspace, the filters' values are numbered from `first`).
    Filters: instance (id), workflow (id), status (one status), failed (no value),
    window (start, asOf), after (sort_at, id).

    The row count is written into the statement (one text per page size, at most 51):
    with a `LIMIT $n` PostgreSQL cannot cost a generic plan and planned the statement anew
    on every call.

    The text depends only on which filters are present, how many values each has, the row
    count and `first`: it is made once per combination (`_PAGE_TEXTS`)."""
    arguments: list[Any] = []
    for values in filters.values():
        arguments.extend(values)
    key = (tuple(filters), tuple(map(len, filters.values())), int(rows), first)
    query = _PAGE_TEXTS.get(key)
    if query is None:
        query = _PAGE_TEXTS[key] = _page_text(filters, int(rows), first)
    return query, arguments


# Page statement texts by (filter names in order, their value counts, rows, first): at most
# a few hundred (filter combinations × page sizes 1-51).
_PAGE_TEXTS: dict[tuple[tuple[str, ...], tuple[int, ...], int, int], str] = {}


def _page_text(filters: dict[str, tuple[Any, ...]], limit: int, first: int) -> str:
    conditions = ["e.workspace_id = $1"]
    numbered = 0
    for name, values in filters.items():
        if name == "failed":
            continue
        numbers = range(numbered + first, numbered + first + len(values))
        conditions.append(_PAGE_CONDITIONS[name].format(*numbers))
        numbered += len(values)
    where = " AND ".join(conditions)
    if "failed" not in filters:
        return (
            f"SELECT {_ROW_COLUMNS} FROM executions e JOIN instances i ON i.id = e.instance_id"
            f" WHERE {where} {_ORDER} LIMIT {limit}"
        )
    branches = " UNION ALL ".join(
        f"(SELECT {_STORED_COLUMNS} FROM executions e"
        f" WHERE {where} AND e.status = '{status}' {_ORDER} LIMIT {limit})"
        for status in FAILED
    )
    return (
        f"SELECT {_ROW_COLUMNS} FROM ({branches}) e JOIN instances i ON i.id = e.instance_id"
        f" {_ORDER} LIMIT {limit}"
    )


ONE_EXECUTION = f"""
SELECT {_ROW_COLUMNS}, e.history
  FROM executions e JOIN instances i ON i.id = e.instance_id
 WHERE e.id = $1 AND e.workspace_id = $2
"""


def _scope_sql(extra_condition: str = "") -> str:
    return f"""
SELECT w.time_zone, w.read_generation, w.execution_poll_interval_seconds,
       (SELECT true FROM instances WHERE id = $2 AND workspace_id = $1) AS instance_found,
       (SELECT instance_id FROM workflows WHERE id = $3 AND workspace_id = $1) AS workflow_instance,
       s.last_sync, s.executions_truncated, s.workflows_truncated,
       ({FIRST_OBSERVED_SQL["executions"]}) AS first_observed
  FROM workspaces w, LATERAL ({INSTANCE_SIDE_SQL}) s
 WHERE w.id = $1{extra_condition}
"""


# The scope of an execution tool call: workspace $1 (zone, read generation, poll interval),
# whether instance $2 and workflow $3 belong to it, and the coverage of the scope.
SCOPE = _scope_sql()
# The same for a caller still to be confirmed: its approval ($4) and, only when that
# approval lists the workspace, the scope: no approval row → no row at all; a workspace not
# listed → the approval's columns with a null scope.
APPROVAL_AND_SCOPE = f"""
SELECT a.*, sc.*
  FROM approval_state($4) a
  LEFT JOIN LATERAL ({_scope_sql(" AND $1 = ANY(a.workspace_ids)")}) sc ON true
"""
FIRST_PAGE_PARAMETER = 5  # the page's own parameters in `first_page_statement`: $5 on

# `first_page_statement` returns the approval-and-scope row and the page's rows in one
# column list, the page's columns first (ROW_COLUMNS): each half fills the other half's
# columns with typed nulls.
_HEAD_NULLS = """NULL::uuid AS account_id, NULL::text AS client_id, NULL::int4 AS generation,
    NULL::text[] AS scopes, NULL::bool AS revoked, NULL::bool AS expired,
    NULL::uuid[] AS workspace_ids, NULL::text[] AS roles, NULL::text AS time_zone,
    NULL::int4 AS read_generation, NULL::int4 AS execution_poll_interval_seconds,
    NULL::bool AS instance_found, NULL::uuid AS workflow_instance,
    NULL::timestamptz AS last_sync, NULL::bool AS executions_truncated,
    NULL::bool AS workflows_truncated, NULL::timestamptz AS first_observed"""
_PAGE_NULLS = """NULL::uuid AS id, NULL::uuid AS instance_id, NULL::uuid AS workflow_id,
    NULL::text AS workflow_name, NULL::text AS source_id, NULL::text AS source_workflow_id,
    NULL::text AS status, NULL::text AS started_at, NULL::text AS created_at,
    NULL::text AS stopped_at, NULL::text AS observed_at, NULL::int8 AS duration_ms,
    NULL::bool AS source_missing, NULL::int8 AS sort_us, NULL::int2 AS cost_state,
    NULL::numeric AS cost_amount, NULL::text AS cc_state, NULL::int8 AS cc_priced,
    NULL::int8 AS cc_unresolved, NULL::int8 AS cc_excluded, NULL::int8 AS cc_observations,
    NULL::int8 AS cc_missing_mapping, NULL::text AS instance_name"""


@lru_cache(maxsize=1024)
def first_page_statement(page_sql: str) -> str:
    """`APPROVAL_AND_SCOPE` and the rows of `page_sql` (a `page_query` statement numbered
    from FIRST_PAGE_PARAMETER, $1 the workspace) in ONE statement: the head row first
    (`head` true), then the page's rows, read only for a workspace the approval lists."""
    return f"""
WITH a AS (SELECT * FROM approval_state($4))
SELECT {_PAGE_NULLS}, true AS head, a.*, sc.*
  FROM a LEFT JOIN LATERAL ({_scope_sql(" AND $1 = ANY(a.workspace_ids)")}) sc ON true
UNION ALL
SELECT p.*, false, {_HEAD_NULLS}
  FROM ({page_sql}) p
 WHERE EXISTS (SELECT 1 FROM a WHERE $1 = ANY(a.workspace_ids))
"""


# Through a transaction-mode pooler the first-page statement runs as a server-side
# function (service/store/plans.py), planned once per backend: the statement calling it,
# per first-page statement text.
_THROUGH_POOLER: dict[str, str] = {}


async def read_first_page(
    conn: asyncpg.Connection,
    workspace_id: UUID,
    instance_id: UUID | None,
    workflow_id: UUID | None,
    approval_id: UUID,
    page_sql: str,
    page_arguments: Sequence[Any],
) -> tuple[asyncpg.Record | None, list[asyncpg.Record]]:
    """The approval-and-scope row (None: the approval is gone) and the page's rows, in the
    page's order, of `first_page_statement(page_sql)`."""
    sql = first_page_statement(page_sql)
    if getattr(conn, "through_pooler", False):
        called = _THROUGH_POOLER.get(sql)
        if called is None:
            called = _THROUGH_POOLER[sql] = await as_function(conn, sql) or sql
        sql = called
    rows = await conn.fetch(
        sql, workspace_id, instance_id, workflow_id, approval_id, *page_arguments
    )
    head = next((row for row in rows if row[_HEAD_AT]), None)
    page = [row for row in rows if not row[_HEAD_AT]]
    # UNION ALL keeps each half's order in practice but SQL does not promise it, and an
    # outer ORDER BY made PostgreSQL plan the statement anew on every call (its generic
    # plan cannot know the LIMIT): sorting the ≤ 51 rows here costs a pass when in order.
    page.sort(key=_page_order, reverse=True)
    return head, page


# A page's order, newest first, then by id; and where a first-page row says which half it is
# from. Read by position, as shape_row reads the rest (ROW_COLUMNS).
_page_order = itemgetter(ROW_COLUMNS.index("sort_us"), ROW_COLUMNS.index("id"))
_HEAD_AT = len(ROW_COLUMNS)
