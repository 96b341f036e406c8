"""Tenant isolation over /mcp: randomized probes through three approvals of two accounts,
with ids of every workspace, instance, workflow and execution in the world, other approvals'
cursors, and a workspace removed from the account mid-approval.

Whatever is asked, an answer is NOT_FOUND or VALIDATION_ERROR, or a success whose every id
belongs to a workspace of the calling approval and whose text carries no other tenant's
marker. A success is only possible when every id argument names a record of the right kind
in the (granted) workspace asked about.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.app_keys import DB_POOL
from tests.hostile.conftest import FUZZ, Hostile
from tests.hostile.strategies import catalog, from_schema
from tests.hostile.wire import Reply, check_answer
from tests.hostile.world import Granted, World, uuids_in

# A failing example of a 30 KiB body is reported either way; its long repr must not turn
# into a second, confusing warning-as-error.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


TOOLS = sorted(catalog())
ID_ARGUMENT_KINDS = {"instanceId": "instance", "workflowId": "workflow", "executionId": "execution"}
REFUSALS = ("NOT_FOUND", "VALIDATION_ERROR")


def check_isolated(world: World, granted: Granted, arguments: dict[str, Any], reply: Reply) -> None:
    check_answer(reply)
    assert reply.status == 200, reply.body[:300]
    own_tenant = world.tenants["a" if granted.name.startswith("a") else "b"]
    for tenant in world.tenants.values():
        if tenant is not own_tenant:
            assert tenant.marker.encode() not in reply.body, "another tenant's text leaked"
    if reply.is_tool_error:
        assert reply.error_code in REFUSALS, reply.body[:300]
        return
    leaked = uuids_in(reply.result) - world.ids_of(granted)
    assert not leaked, f"rows of other workspaces: {leaked}"
    workspace = arguments.get("workspaceId")
    if workspace is None:
        return
    workspace = str(uuid.UUID(workspace))
    assert uuid.UUID(workspace) in granted.workspaces, "an ungranted workspace answered"
    for name, kind in ID_ARGUMENT_KINDS.items():
        if name in arguments:
            found = world.records.get(str(uuid.UUID(arguments[name])))
            assert found == (kind, workspace), f"{name} of another workspace answered"


def probe_ids(world: World) -> st.SearchStrategy[str]:
    real = sorted(world.records)
    return st.one_of(
        st.sampled_from(real), st.sampled_from(real).map(str.upper), st.uuids().map(str)
    )


@given(data=st.data())
@FUZZ
async def test_randomized_probes_never_cross_workspaces(
    hostile: Hostile, data: st.DataObject
) -> None:
    world = hostile.world
    granted = world.approvals[data.draw(st.sampled_from(sorted(world.approvals)), label="who")]
    tool = data.draw(st.sampled_from(TOOLS), label="tool")
    schema = catalog()[tool]
    arguments = data.draw(from_schema(schema, probe_ids(world)), label="arguments")
    if "timeZone" in arguments:
        arguments["timeZone"] = data.draw(st.sampled_from(["UTC", "Europe/Berlin"]))
    if "cursor" in arguments:
        del arguments["cursor"]
    reply = await hostile.mcp.call(granted.token, tool, arguments)
    check_isolated(world, granted, arguments, reply)


async def test_every_foreign_workspace_is_not_found_for_every_tool(hostile: Hostile) -> None:
    world = hostile.world
    for granted in world.approvals.values():
        foreign = [
            ws["id"]
            for _, ws in world.workspace_records()
            if uuid.UUID(ws["id"]) not in granted.workspaces
        ]
        assert foreign
        for tool in TOOLS:
            if "workspaceId" not in catalog()[tool]["properties"]:
                continue
            for ws in foreign:
                arguments = _complete(world, tool, ws)
                reply = await hostile.mcp.call(granted.token, tool, arguments)
                check_isolated(world, granted, arguments, reply)
                assert reply.error_code == "NOT_FOUND", (granted.name, tool, reply.body[:300])


def _complete(world: World, tool: str, workspace: str) -> dict[str, Any]:
    """Arguments naming real records of `workspace` in every id slot the tool has."""
    arguments: dict[str, Any] = {"workspaceId": workspace}
    props = catalog()[tool]["properties"]
    for name, kind in ID_ARGUMENT_KINDS.items():
        if name in props and name in catalog()[tool].get("required", []):
            arguments[name] = next(
                i for i, (k, w) in world.records.items() if k == kind and w == workspace
            )
    if tool == "get_execution_stats":
        arguments |= {"period": "all", "timeZone": "UTC"}
    return arguments


async def test_records_of_another_workspace_under_a_granted_one_are_not_found(
    hostile: Hostile,
) -> None:
    world = hostile.world
    granted = world.approvals["a"]
    own = str(granted.workspaces[0])
    for record_id, (kind, ws) in world.records.items():
        if ws == own or kind not in ID_ARGUMENT_KINDS.values():
            continue
        name = next(n for n, k in ID_ARGUMENT_KINDS.items() if k == kind)
        for tool in TOOLS:
            if name not in catalog()[tool]["properties"]:
                continue
            arguments = {**_complete(world, tool, own), name: record_id}
            if tool == "get_many_sync_jobs" and "instanceId" not in arguments:
                continue
            reply = await hostile.mcp.call(granted.token, tool, arguments)
            check_isolated(world, granted, arguments, reply)
            assert reply.error_code == "NOT_FOUND", (tool, kind, reply.body[:300])


async def _first_page_cursor(hostile: Hostile, granted: Granted, tool: str, ws: str) -> str:
    arguments = {"workspaceId": ws, "limit": 1}
    if tool == "get_many_workspaces":
        arguments = {"limit": 1}
    reply = await hostile.mcp.call(granted.token, tool, arguments)
    cursor: str = reply.structured["nextCursor"]
    assert cursor
    return cursor


async def test_cursors_of_other_approvals_are_refused(hostile: Hostile) -> None:
    world = hostile.world
    a, a1, b = world.approvals["a"], world.approvals["a1"], world.approvals["b"]
    ws_a0, ws_b0 = str(a.workspaces[0]), str(b.workspaces[0])
    for tool in ("get_many_workflows", "get_many_executions", "get_many_workspaces"):
        cursor = await _first_page_cursor(hostile, a, tool, ws_a0)
        # Same account and workspace, another approval: the cursor is bound to approval a.
        for thief, ws in ((a1, ws_a0), (b, ws_b0), (b, ws_a0)):
            arguments: dict[str, Any] = {"workspaceId": ws, "limit": 1, "cursor": cursor}
            if tool == "get_many_workspaces":
                arguments = {"limit": 1, "cursor": cursor}
            reply = await hostile.mcp.call(thief.token, tool, arguments)
            check_isolated(world, thief, arguments, reply)
            assert reply.is_tool_error, (tool, thief.name, reply.body[:300])
            assert reply.error_code in REFUSALS


async def test_workspace_removed_mid_approval(hostile: Hostile) -> None:
    world = hostile.world
    a = world.approvals["a"]
    kept, removed = str(a.workspaces[0]), str(a.workspaces[1])
    cursors = {
        ws: await _first_page_cursor(hostile, a, "get_many_workflows", ws) for ws in (kept, removed)
    }
    list_cursor = await _first_page_cursor(hostile, a, "get_many_workspaces", "")
    async with hostile.app[DB_POOL].acquire() as conn:
        await conn.execute(
            "DELETE FROM memberships WHERE account_id = $1 AND workspace_id = $2",
            a.account_id,
            uuid.UUID(removed),
        )
    # The token still verifies; the eligible set shrinks on this very next call.
    reachable = [w for w in a.workspaces if str(w) != removed]
    still = Granted(a.name, a.account_id, a.approval, a.token, a.refresh_token, reachable)
    listed = await hostile.mcp.call(a.token, "get_many_workspaces", {"limit": 50})
    assert sorted(w["id"] for w in listed.structured["workspaces"]) == sorted(map(str, reachable))
    for tool in TOOLS:
        if "workspaceId" not in catalog()[tool]["properties"]:
            continue
        arguments = _complete(world, tool, removed)
        reply = await hostile.mcp.call(a.token, tool, arguments)
        check_isolated(world, still, arguments, reply)
        assert reply.error_code == "NOT_FOUND", (tool, reply.body[:300])
    # Cursors issued before the change are bound to the old eligible set: refused.
    for ws, cursor in cursors.items():
        arguments = {"workspaceId": ws, "limit": 1, "cursor": cursor}
        reply = await hostile.mcp.call(a.token, "get_many_workflows", arguments)
        check_isolated(world, still, arguments, reply)
        assert reply.error_code in REFUSALS, reply.body[:300]
    reply = await hostile.mcp.call(
        a.token, "get_many_workspaces", {"limit": 1, "cursor": list_cursor}
    )
    assert reply.error_code == "VALIDATION_ERROR", reply.body[:300]


async def test_walking_every_list_returns_only_own_rows(hostile: Hostile) -> None:
    """Following nextCursor to the end through each approval never meets a foreign id."""
    world = hostile.world
    for granted in world.approvals.values():
        for ws in granted.workspaces:
            for tool in ("get_many_workflows", "get_many_executions"):
                arguments: dict[str, Any] = {"workspaceId": str(ws), "limit": 1}
                if tool == "get_many_workflows":
                    arguments["lifecycle"] = "all"
                seen: set[str] = set()
                while True:
                    reply = await hostile.mcp.call(granted.token, tool, arguments)
                    check_isolated(world, granted, arguments, reply)
                    page = reply.structured
                    rows = page["workflows" if tool == "get_many_workflows" else "executions"]
                    ids = {r["id"] for r in rows}
                    assert not ids & seen, "a row came twice"
                    seen |= ids
                    if page["nextCursor"] is None:
                        break
                    arguments["cursor"] = page["nextCursor"]
                kind = "workflow" if tool == "get_many_workflows" else "execution"
                expected = {i for i, (k, w) in world.records.items() if (k, w) == (kind, str(ws))}
                assert seen == expected
