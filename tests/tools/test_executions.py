"""get_many_executions and get_execution against real PostgreSQL, every output validated
against the catalog's outputSchema: order, filters, periods, cursors, bounds, shaping."""

from __future__ import annotations

import base64
import itertools
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.errors import CursorStale, NotFound, ValidationError
from service.rules.shaping import duration_ms, format_instant
from service.store.reads.executions import _DURATION, utc_text_sql
from service.tools.coverage import coverage
from service.tools.execution_scope import read_scope
from tests.support.snapshots import ABSENT, Snapshot
from tests.tools.execution_support import Client, load, workspace_client

NOW = datetime(2025, 1, 15, 12, 0, tzinfo=UTC)
ASTRAL = "\U0001f600"


def ids(page: dict[str, Any]) -> list[str]:
    return [row["id"] for row in page["executions"]]


async def walk(client: Client, **arguments: Any) -> list[dict[str, Any]]:
    pages = []
    page = await client.call("get_many_executions", **arguments)
    pages.append(page)
    while page["nextCursor"] is not None:
        page = await client.call("get_many_executions", **arguments, cursor=page["nextCursor"])
        assert page["executions"], "a cursor never leads to an empty page"
        pages.append(page)
    return pages


def at(hours: float) -> str:
    """An instant `hours` before NOW, as RFC 3339."""
    return (NOW - timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


async def test_order_by_chronology_then_observed_then_id_desc(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="Europe/Berlin")
    inst = snap.instance(ws, name="Production n8n")
    same = at(2)
    tie_ids = sorted(
        ["10000000-0000-4000-8000-000000000001", "f0000000-0000-4000-8000-000000000001",
         "80000000-0000-4000-8000-000000000001"]
    )  # fmt: skip
    for tie in tie_ids:
        snap.execution(inst, id=tie.upper(), startedAt=same)
    created_only = snap.execution(inst, startedAt=None, createdAt=at(1))
    undated = snap.execution(inst, startedAt=None, createdAt=None, observedAt=at(3))
    oldest = snap.execution(inst, startedAt=at(10))
    await load(db_pool, snap)

    page = await workspace_client(db_pool, ws, NOW).call(
        "get_many_executions", workspaceId=ws["id"]
    )
    assert ids(page) == [created_only["id"], *reversed(tie_ids), undated["id"], oldest["id"]]
    assert page["nextCursor"] is None
    assert page["period"] == "all"
    assert page["timeZone"] == "Europe/Berlin"
    assert page["asOf"] == "2025-01-15T13:00:00+01:00"
    row = page["executions"][1]
    assert row["instanceName"] == "Production n8n"
    assert row["id"] == tie_ids[-1]  # stored and returned lowercase
    assert page["coverage"]["partial"] is True


async def test_cursor_walk_returns_every_row_exactly_once(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    made = [snap.execution(inst, startedAt=at(i // 3)) for i in range(23)]  # many ties
    made += [snap.execution(inst, startedAt=None, createdAt=None) for _ in range(2)]
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)

    for limit in (1, 5, 25, 50):
        pages = await walk(client, workspaceId=ws["id"], limit=limit)
        seen = [i for p in pages for i in ids(p)]
        assert sorted(seen) == sorted(m["id"] for m in made)
        assert len(seen) == len(set(seen)) == 25
        assert len(pages) == -(-25 // limit)  # exact multiples end without an empty page
        assert {p["asOf"] for p in pages} == {pages[0]["asOf"]}


async def test_walk_is_stable_when_time_moves_on(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace(timeZone="UTC")
    inst = snap.instance(ws)
    for i in range(6):
        snap.execution(inst, startedAt=at(i))
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)
    first = await client.call("get_many_executions", workspaceId=ws["id"], period="today", limit=2)
    client.now = NOW + timedelta(days=3)  # the window would be empty now
    second = await client.call(
        "get_many_executions", workspaceId=ws["id"], period="today", limit=2,
        cursor=first["nextCursor"],
    )  # fmt: skip
    assert second["asOf"] == first["asOf"] == "2025-01-15T12:00:00+00:00"
    assert len(second["executions"]) == 2


async def test_cursor_errors(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    for i in range(4):
        snap.execution(inst, startedAt=at(i))
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)
    args: dict[str, Any] = {"workspaceId": ws["id"], "limit": 2}
    cursor = (await client.call("get_many_executions", **args))["nextCursor"]
    assert cursor is not None

    def tampered(text: str) -> str:
        raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        raw[-1] ^= 1
        return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()

    for bad in (tampered(cursor), cursor + "A", "not a cursor", cursor + "=="):
        with pytest.raises(ValidationError):
            await client.call("get_many_executions", **args, cursor=bad)
    # bound to the filters and the limit
    for changed in ({"limit": 3}, {"status": "success"}, {"period": "7d"}, {"timeZone": "UTC"}):
        with pytest.raises(ValidationError):
            await client.call("get_many_executions", **{**args, **changed}, cursor=cursor)
    # another connection (caller) of the same account cannot use it
    other = workspace_client(db_pool, ws, NOW, codec=client.codec)
    with pytest.raises(ValidationError):
        await other.call("get_many_executions", **args, cursor=cursor)
    # a reload that changes the read generation makes it stale
    async with db_pool.acquire() as conn:
        await conn.execute(
            "UPDATE workspaces SET read_generation = read_generation + 1 WHERE id = $1",
            UUID(ws["id"]),
        )
    with pytest.raises(CursorStale) as stale:
        await client.call("get_many_executions", **args, cursor=cursor)
    assert stale.value.text == "MCP_CURSOR_STALE: Read settings changed. Restart without a cursor."


async def test_filters_status_instance_workflow(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst, inst2 = snap.instance(ws), snap.instance(ws)
    wf = snap.workflow(inst)
    error = snap.execution(inst, wf, status="error", startedAt=at(1))
    crashed = snap.execution(inst2, status="crashed", startedAt=at(2))
    canceled = snap.execution(inst, wf, status="canceled", startedAt=at(3))
    success = snap.execution(inst, status="success", startedAt=at(4))
    other_ws = snap.workspace()
    other_inst = snap.instance(other_ws)
    other_wf = snap.workflow(other_inst)
    snap.execution(other_inst, other_wf)
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)
    call = client.call

    async def listed(**filters: Any) -> list[str]:
        return ids(await call("get_many_executions", workspaceId=ws["id"], **filters))

    assert await listed(status="failed") == [error["id"], crashed["id"]]
    assert await listed(status="canceled") == [canceled["id"]]
    assert await listed(status="waiting") == []
    assert await listed(instanceId=inst2["id"].upper()) == [crashed["id"]]
    assert await listed(workflowId=wf["id"]) == [error["id"], canceled["id"]]
    assert await listed(workflowId=wf["id"], status="failed") == [error["id"]]
    assert len(await listed()) == 4 and success["id"] in await listed()
    for missing in ({"workflowId": other_wf["id"]}, {"instanceId": other_inst["id"]},
                    {"workflowId": "33333333-3333-4333-8333-333333333333"}):  # fmt: skip
        with pytest.raises(NotFound):
            await listed(**missing)
    with pytest.raises(NotFound):  # a workspace not granted
        await call("get_many_executions", workspaceId=other_ws["id"])
    for bad in ({"status": "failure"}, {"limit": 0}, {"limit": 51}, {"limit": 5.5},
                {"instanceId": "nope"}, {"extra": 1}, {"cursor": ""}):  # fmt: skip
        with pytest.raises(ValidationError):
            await listed(**bad)
    assert len(await listed(limit=2.0)) == 2


async def test_periods_in_zones_undated_only_in_all_future_rows(db_pool: asyncpg.Pool) -> None:
    # NOW is 2025-01-15T12:00Z; in Asia/Tokyo that is 21:00 on the 15th
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Tokyo")
    inst = snap.instance(ws)
    today = snap.execution(inst, startedAt="2025-01-14T15:00:00Z")  # 00:00 Tokyo, 15th
    yesterday = snap.execution(inst, startedAt="2025-01-14T14:59:59.999Z")
    created = snap.execution(inst, startedAt=None, createdAt="2025-01-15T11:00:00Z")
    undated = snap.execution(inst, startedAt=None, createdAt=None, observedAt=at(0.5))
    future = snap.execution(inst, startedAt="2025-01-15T12:00:00.001Z")
    month_old = snap.execution(inst, startedAt="2024-12-10T00:00:00Z")
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)

    async def listed(**filters: Any) -> list[str]:
        return ids(await client.call("get_many_executions", workspaceId=ws["id"], **filters))

    assert await listed(period="today") == [created["id"], today["id"]]
    assert await listed(period="7d") == [created["id"], today["id"], yesterday["id"]]
    assert await listed(period="30d") == [created["id"], today["id"], yesterday["id"]]
    # undated rows sort by observedAt (11:30) among the dated ones
    assert await listed() == [future["id"], undated["id"], created["id"], today["id"],
                              yesterday["id"], month_old["id"]]  # fmt: skip
    # in UTC the 15th starts 9 hours later
    assert await listed(period="today", timeZone="UTC") == [created["id"]]
    page = await client.call("get_many_executions", workspaceId=ws["id"], timeZone="Asia/Kathmandu")
    assert page["asOf"] == "2025-01-15T17:45:00+05:45"
    with pytest.raises(ValidationError) as bad_zone:
        await listed(timeZone="Mars/Olympus")
    assert "timeZone" in bad_zone.value.message
    # precedence: the zone is checked before NOT_FOUND
    with pytest.raises(ValidationError):
        await client.call(
            "get_many_executions", workspaceId="33333333-3333-4333-8333-333333333333",
            timeZone="Mars/Olympus",
        )  # fmt: skip


async def test_row_shape_cost_duration_and_truncation(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    long_name = ASTRAL * 101
    rows = {
        "absent": snap.execution(inst, startedAt=at(1), cost=ABSENT, workflowName=long_name,
                                 stoppedAt=at(1 - 1.9999 / 3600)),
        "null": snap.execution(inst, startedAt=at(2), cost=None, stoppedAt=at(3)),
        "priced": snap.execution(
            inst, startedAt=at(3), cost={"amount": "1.500"}, stoppedAt=None,
            costCoverage={"state": "partial", "pricedComponents": 1, "unresolvedComponents": 2,
                          "excludedComponents": 0, "observations": 3,
                          "missingMappingObservations": 2}),
        "zero": snap.execution(inst, startedAt=at(4), cost={"amount": "0.000"},
                               workflowName="x" * 100),
    }  # fmt: skip
    await load(db_pool, snap)
    page = await workspace_client(db_pool, ws, NOW).call(
        "get_many_executions", workspaceId=ws["id"]
    )
    shown = {row["id"]: row for row in page["executions"]}
    absent = shown[rows["absent"]["id"]]
    assert "cost" not in absent and "costCoverage" not in absent
    assert absent["workflowName"] == ASTRAL * 100 and absent["workflowNameTruncated"] is True
    assert absent["durationMs"] == 1999  # rounded down
    null = shown[rows["null"]["id"]]
    assert null["cost"] is None
    assert null["durationMs"] is None  # stopped before started
    priced = shown[rows["priced"]["id"]]
    assert priced["cost"] == {"amount": "1.5", "currency": "USD", "kind": "estimated",
                              "basis": "openrouter"}  # fmt: skip
    assert priced["costCoverage"]["missingMappingObservations"] == 2
    assert priced["durationMs"] is None and priced["stoppedAt"] is None
    zero = shown[rows["zero"]["id"]]
    assert zero["cost"]["amount"] == "0"
    assert (zero["workflowName"], zero["workflowNameTruncated"]) == ("x" * 100, False)


async def test_response_bound_drops_rows_and_returns_a_cursor(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws, name=ASTRAL * 200)
    wf = snap.workflow(inst, name=ASTRAL * 200)
    made = [
        snap.execution(inst, wf, startedAt=at(i), workflowName=ASTRAL * 500 + '"',
                       sourceId=ASTRAL * 200, sourceWorkflowId='"\\' * 150,
                       cost={"amount": "9" * 38 + "." + "1" * 18},
                       costCoverage={"state": "partial", "pricedComponents": 2**53 - 1,
                                     "unresolvedComponents": 2**53 - 1,
                                     "excludedComponents": 2**53 - 1,
                                     "observations": 2**53 - 1,
                                     "missingMappingObservations": 2**53 - 1})
        for i in range(60)
    ]  # fmt: skip
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)
    pages = await walk(client, workspaceId=ws["id"])
    first = pages[0]
    assert 0 < len(first["executions"]) < 50
    assert first["nextCursor"] is not None
    budget = client.max_response_bytes - 200
    for page in pages:
        page.pop("_bytes")
        structured = _compact(page)
        text = _compact(structured.decode())
        assert len(structured) + len(text) <= budget
    seen = [i for p in pages for i in ids(p)]
    assert seen == [m["id"] for m in made]


def _compact(value: Any) -> bytes:
    import msgspec

    return msgspec.json.encode(value)


async def test_get_execution_with_history_and_not_found(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    inst = snap.instance(ws)
    wf = snap.workflow(inst)
    report = {
        "schemaVersion": 1, "availability": "available", "reason": None,
        "observedAt": "2025-01-15T09:05:00Z", "order": "recorded", "workflowVersionId": None,
        "pinnedData": False,
        "pinning": {"status": "not_used", "source": "none", "pinnedNodeIds": []},
        "failure": {"nodeId": "node-2", "runId": "node-2:0"},
        "nodes": [{"id": "node-2", "name": "Notify team", "type": "n8n-nodes-base.slack",
                   "provenance": "recorded_run", "pinned": None,
                   "runs": [{"id": f"node-2:{r}", "status": "error",
                             "startedAt": "2025-01-15T09:00:01Z", "durationMs": 420,
                             "pinned": None,
                             "error": {"name": "NodeApiError",
                                       "message": "x" * (2000 if r == 0 else 10)},
                             "usage": []} for r in range(130)]}],
        "truncated": False,
    }  # fmt: skip
    with_history = snap.execution(inst, wf, status="error", history=report)
    without = snap.execution(inst, wf, cost=None)
    other_ws = snap.workspace()
    foreign = snap.execution(snap.instance(other_ws))
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)

    out = await client.call(
        "get_execution", workspaceId=ws["id"], executionId=with_history["id"].upper()
    )
    assert out["execution"]["id"] == with_history["id"]
    assert out["execution"]["workflowId"] == wf["id"]
    history = out["history"]
    assert (history["availability"], history["truncated"]) == ("partial", True)
    assert len(history["nodes"][0]["runs"]) == 128
    assert history["nodes"][0]["runs"][0]["error"]["message"] == "x" * 1000
    assert list(out) == ["workspaceId", "execution", "coverage", "history", "_bytes"]

    plain = await client.call("get_execution", workspaceId=ws["id"], executionId=without["id"])
    assert "history" not in plain and plain["execution"]["cost"] is None
    assert plain["coverage"]["firstObservedAt"] == "2025-01-15T09:35:00Z"
    with pytest.raises(NotFound):
        await client.call("get_execution", workspaceId=ws["id"], executionId=foreign["id"])
    with pytest.raises(NotFound):
        await client.call("get_execution", workspaceId=other_ws["id"], executionId=foreign["id"])
    with pytest.raises(ValidationError):
        await client.call("get_execution", workspaceId=ws["id"])


async def test_every_filter_combination_walks_like_a_sorted_list(db_pool: asyncpg.Pool) -> None:
    """Each filter combination is its own statement (`failed` merges two ordered reads): every
    walk with a small limit returns exactly the matching rows in list order, across ties of
    chronology between error and crashed rows, undated rows and page boundaries."""
    snap = Snapshot()
    ws = snap.workspace(timeZone="Asia/Kathmandu")
    insts = [snap.instance(ws), snap.instance(ws)]
    wfs = [snap.workflow(insts[0]), snap.workflow(insts[0]), snap.workflow(insts[1])]
    statuses = ["error", "crashed", "success", "waiting", "error", "crashed", "canceled"]
    rows = []
    for n in range(42):
        wf = wfs[n % 3] if n % 4 else None
        inst = insts[1] if wf is wfs[2] or (wf is None and n % 8 == 0) else insts[0]
        started = None if n % 9 == 0 else at(24 * (n % 11) + (n % 3) / 2)  # ties and undated
        rows.append(snap.execution(
            inst, wf, status=statuses[n % 7], startedAt=started,
            createdAt=None if n % 18 == 0 else at(200), observedAt=at(n % 5),
        ))  # fmt: skip
    await load(db_pool, snap)
    client = workspace_client(db_pool, ws, NOW)

    def key(row: dict[str, Any]) -> tuple[str, str]:
        chronology = row["startedAt"] or row["createdAt"] or row["observedAt"]
        instant = datetime.fromisoformat(chronology.replace("Z", "+00:00"))
        return instant.isoformat(), row["id"]

    for instance, workflow, status, period in itertools.product(
        [None, insts[0], insts[1]], [None, wfs[0], wfs[2]], [None, "failed", "error", "waiting"],
        ["all", "7d"],
    ):  # fmt: skip
        arguments: dict[str, Any] = {"workspaceId": ws["id"], "limit": 4, "period": period}
        expected = list(rows)
        if instance is not None:
            arguments["instanceId"] = instance["id"]
            expected = [r for r in expected if r["instanceId"] == instance["id"]]
        if workflow is not None:
            arguments["workflowId"] = workflow["id"]
            expected = [r for r in expected if r["workflowId"] == workflow["id"]]
        if status is not None:
            arguments["status"] = status
            wanted = {"error", "crashed"} if status == "failed" else {status}
            expected = [r for r in expected if r["status"] in wanted]
        if period == "7d":  # dated rows from the first instant of 6 days before today
            start = datetime(2025, 1, 8, 18, 15, tzinfo=UTC)  # 2025-01-09T00:00+05:45
            expected = [r for r in expected if (r["startedAt"] or r["createdAt"])
                        and start.isoformat() <= key(r)[0] <= NOW.isoformat()]  # fmt: skip
        expected.sort(key=key, reverse=True)
        pages = await walk(client, **arguments)
        got = [row["id"] for page in pages for row in page["executions"]]
        assert got == [r["id"] for r in expected], (instance, workflow, status, period)


async def test_workflow_of_another_instance_gives_an_empty_page(db_pool: asyncpg.Pool) -> None:
    snap = Snapshot()
    ws = snap.workspace()
    first, second = snap.instance(ws), snap.instance(ws)
    wf = snap.workflow(first)
    snap.execution(first, wf)
    await load(db_pool, snap)
    page = await workspace_client(db_pool, ws, NOW).call(
        "get_many_executions", workspaceId=ws["id"], workflowId=wf["id"], instanceId=second["id"]
    )
    assert page["executions"] == [] and page["nextCursor"] is None


INSTANTS = st.datetimes(
    min_value=datetime(1000, 1, 1), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
).map(lambda v: v.replace(microsecond=v.microsecond // 1000 * 1000) if v.second % 2 else v)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(st.lists(st.tuples(INSTANTS, INSTANTS), min_size=1, max_size=40))
async def test_row_instants_and_durations_written_in_sql_match_the_python_rules(
    db_pool: asyncpg.Pool, pairs: list[tuple[datetime, datetime]]
) -> None:
    """Rows carry instants and durationMs computed by PostgreSQL: they agree with
    shaping.format_instant and shaping.duration_ms (whole seconds, ms, µs; negative → null)."""
    pairs += [(p[0], p[0].replace(microsecond=0)) for p in pairs]
    query = f"""
        SELECT {utc_text_sql("e.started_at")}, {utc_text_sql("e.stopped_at")},
               {_DURATION}
          FROM unnest($1::timestamptz[], $2::timestamptz[]) AS e(started_at, stopped_at)"""
    rows = await db_pool.fetch(query, [p[0] for p in pairs], [p[1] for p in pairs])
    for (started, stopped), row in zip(pairs, rows, strict=True):
        assert row[0] == format_instant(started) and row[1] == format_instant(stopped)
        assert row[2] == duration_ms(started, stopped)


async def test_scope_coverage_equals_the_shared_coverage(db_pool: asyncpg.Pool) -> None:
    """The one-statement scope read of the execution tools reports what common.coverage does,
    for the workspace and for each instance (truncation flags, last sync, first observed)."""
    snap = Snapshot()
    ws = snap.workspace()
    full = snap.instance(ws, lastSyncAt="2025-01-15T10:00:00Z")
    cut = snap.instance(ws, historyComplete=False, workflowInventoryTruncated=True,
                        lastSyncAt=None)  # fmt: skip
    idle = snap.instance(ws)
    snap.execution(full, observedAt=at(5))
    snap.execution(cut, observedAt=at(7))
    empty = snap.workspace()
    await load(db_pool, snap)
    ctx = Client(db_pool, {UUID(ws["id"]): "owner", UUID(empty["id"]): "owner"}, NOW).context()
    async with db_pool.acquire() as conn:
        for workspace, instance in [(ws, None), (ws, full), (ws, cut), (ws, idle), (empty, None)]:
            workspace_id = UUID(workspace["id"])
            instance_id = None if instance is None else UUID(instance["id"])
            scope = await read_scope(ctx, conn, workspace_id, instance_id)
            assert scope.coverage == await coverage(conn, workspace_id, instance_id, "executions")
            assert scope.instance_found is (instance is not None)
