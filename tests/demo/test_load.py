"""The demo snapshot through the real loader into the test database: it loads, twice and at a
later `now` without adding rows, and the records read back as the document says."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import asyncpg
import msgspec

from service.demo.document import DEFAULT_SEED, DEMO_EMAIL, demo_snapshot
from service.store.load_snapshot import load_snapshot
from tests.demo.conftest import NOW


def _uuids(rows: list[dict[str, Any]]) -> list[UUID]:
    return [UUID(r["id"]) for r in rows]


async def _counts(conn: asyncpg.Connection, doc: dict[str, Any]) -> dict[str, int]:
    instances = _uuids(doc["instances"])
    workspaces = _uuids(doc["workspaces"])
    return {
        "workspaces": await conn.fetchval(
            "SELECT count(*) FROM workspaces WHERE id = ANY($1)", workspaces
        ),
        "memberships": await conn.fetchval(
            "SELECT count(*) FROM memberships WHERE workspace_id = ANY($1)", workspaces
        ),
        "instances": await conn.fetchval(
            "SELECT count(*) FROM instances WHERE id = ANY($1)", instances
        ),
        "syncJobs": await conn.fetchval(
            "SELECT count(*) FROM sync_jobs WHERE instance_id = ANY($1)", instances
        ),
        "workflows": await conn.fetchval(
            "SELECT count(*) FROM workflows WHERE instance_id = ANY($1)", instances
        ),
        "executions": await conn.fetchval(
            "SELECT count(*) FROM executions WHERE instance_id = ANY($1)", instances
        ),
    }


async def test_loads_twice_and_later_without_adding_rows(db_pool: asyncpg.Pool) -> None:
    first = demo_snapshot(DEFAULT_SEED, NOW)
    later = demo_snapshot(DEFAULT_SEED, NOW + timedelta(days=2, minutes=17))
    async with db_pool.acquire() as conn:
        report = await load_snapshot(conn, msgspec.json.encode(first))
        assert report.executions == len(first["executions"])
        assert report.sync_jobs == len(first["syncJobs"])
        counts = await _counts(conn, first)
        expected = {k: len(v) for k, v in first.items() if k in counts}
        expected["memberships"] = sum(len(w["members"]) for w in first["workspaces"])
        assert counts == expected
        await load_snapshot(conn, msgspec.json.encode(first))
        assert await _counts(conn, first) == expected
        await load_snapshot(conn, msgspec.json.encode(later))
        assert await _counts(conn, later) == expected
        newest = await conn.fetchval(
            "SELECT max(observed_at) FROM executions WHERE instance_id = ANY($1)",
            _uuids(later["instances"]),
        )
    assert newest > NOW + timedelta(days=2)


async def test_demo_account_sees_its_workspaces_and_not_the_other(
    demo_loaded: dict[str, Any], db_pool: asyncpg.Pool
) -> None:
    rows = await db_pool.fetch(
        """SELECT w.name, m.role FROM memberships m
             JOIN accounts a ON a.id = m.account_id JOIN workspaces w ON w.id = m.workspace_id
            WHERE lower(a.email) = $1 ORDER BY w.name""",
        DEMO_EMAIL,
    )
    assert len(rows) == 5
    assert {r["role"] for r in rows} == {"owner", "admin", "member"}
    assert "Globex Finance" not in {r["name"] for r in rows}
    hashed = await db_pool.fetchval(
        "SELECT password_hash FROM accounts WHERE lower(email) = $1", DEMO_EMAIL
    )
    assert hashed and "demo-password-change-me" not in hashed


async def test_inventory_past_32_kib_is_stored_whole_and_bounded(
    demo_loaded: dict[str, Any], db_pool: asyncpg.Pool
) -> None:
    row = await db_pool.fetchrow(
        """SELECT node_count, nodes_truncated, octet_length(nodes_inventory) AS size
             FROM workflows WHERE instance_id = ANY($1) ORDER BY node_count DESC LIMIT 1""",
        _uuids(demo_loaded["instances"]),
    )
    assert row["node_count"] == 1000
    assert row["nodes_truncated"] is True
    assert row["size"] <= 32 * 1024


async def test_exact_costs_survive_loading(
    demo_loaded: dict[str, Any], db_pool: asyncpg.Pool
) -> None:
    priced = {e["id"]: e["cost"]["amount"] for e in demo_loaded["executions"] if e.get("cost")}
    rows = await db_pool.fetch(
        "SELECT id, cost_amount FROM executions WHERE id = ANY($1)",
        [UUID(i) for i in priced],
    )
    assert len(rows) == len(priced)
    for row in rows:
        assert row["cost_amount"] == Decimal(priced[str(row["id"])])
