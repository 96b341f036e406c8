"""Every statement that reads execution rows returns ROW_COLUMNS first, in their order:
the tools unpack a row by position (service/tools/executions.py shape_row), so a column
added, moved or renamed in one statement but not in the tuple would shift every field of
every answer. Each statement is prepared on the test database and its columns compared,
and ExecutionRow's fields are held to the order shape_row passes them in."""

from __future__ import annotations

import asyncpg
import pytest

from service.store.reads.executions import (
    FIRST_PAGE_PARAMETER,
    ONE_EXECUTION,
    ROW_COLUMNS,
    first_page_statement,
    page_query,
)
from service.tools.executions import ExecutionRow

FILTERS = {
    "instance": ("00000000-0000-0000-0000-000000000001",),
    "workflow": ("00000000-0000-0000-0000-000000000002",),
    "status": ("success",),
    "failed": (),
    "window": (None, None),
    "after": (None, "00000000-0000-0000-0000-000000000003"),
}
COMBINATIONS = [
    {},
    {"instance": FILTERS["instance"]},
    {"workflow": FILTERS["workflow"], "status": FILTERS["status"]},
    {"failed": ()},
    {"instance": FILTERS["instance"], "failed": (), "window": FILTERS["window"]},
    {"window": FILTERS["window"], "after": FILTERS["after"]},
]


async def _columns(pool: asyncpg.Pool, sql: str) -> list[str]:
    async with pool.acquire() as conn:
        statement = await conn.prepare(sql)
        return [attribute.name for attribute in statement.get_attributes()]


@pytest.mark.parametrize("filters", COMBINATIONS, ids=lambda f: "+".join(f) or "none")
async def test_pages_return_the_row_columns_first(
    db_pool: asyncpg.Pool, filters: dict[str, tuple[object, ...]]
) -> None:
    later, _ = page_query(filters, 51)
    assert await _columns(db_pool, later) == list(ROW_COLUMNS)
    first, _ = page_query(filters, 51, first=FIRST_PAGE_PARAMETER)
    columns = await _columns(db_pool, first_page_statement(first))
    assert columns[: len(ROW_COLUMNS)] == list(ROW_COLUMNS)
    assert columns[len(ROW_COLUMNS)] == "head"


async def test_one_execution_returns_the_row_columns_then_its_history(
    db_pool: asyncpg.Pool,
) -> None:
    assert await _columns(db_pool, ONE_EXECUTION) == [*ROW_COLUMNS, "history"]


def test_shape_row_passes_the_execution_fields_in_their_order() -> None:
    """shape_row builds ExecutionRow from positional arguments: its fields must stay in the
    order the call passes them (moving one would put a value under another name)."""
    assert ExecutionRow.__struct_fields__[:15] == (
        "id", "instanceId", "instanceName", "workflowId", "workflowName",
        "workflowNameTruncated", "sourceId", "sourceWorkflowId", "status", "startedAt",
        "createdAt", "stoppedAt", "durationMs", "observedAt", "sourceMissing",
    )  # fmt: skip
