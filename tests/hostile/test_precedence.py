"""One precedence for every tool in both protocol eras (docs/decisions/auth.md, Precedence):
an ended approval (401) before a missing scope (403), before a limit (429), before argument
errors. The case that once split the tools: an approval whose rate budget is spent, then
revoked, is 401 on all nine, not 429 on the three that read their own approval."""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from service.app_keys import CATALOG, DB_POOL, TOKENS
from service.auth.approvals import create_operator_client, grant_approval, issue_tokens
from service.auth.caller import N8N_READ
from tests.hostile.conftest import Hostile, HostileFactory
from tests.hostile.test_token_attacks import SESSION_VERSION, _session_headers, initialize
from tests.hostile.wire import Reply, check_answer
from tests.hostile.world import Granted

BUDGET = "3"  # requests a minute per approval: spent by the first few calls


def tool_names(h: Hostile) -> list[str]:
    names = list(h.app[CATALOG].names)
    assert len(names) == 9, names
    return names


class Era:
    """Calls a tool in one protocol era (2026-07-28 per request, or a 2025 session)."""

    def __init__(self, h: Hostile, token: str, era: str) -> None:
        self.h, self.token, self.era = h, token, era
        self.session: str | None = None

    async def open(self) -> None:
        if self.era == "session":
            self.session = await initialize(self.h, self.token)

    async def call(self, tool: str, arguments: dict[str, Any]) -> Reply:
        if self.era == "modern":
            return await self.h.mcp.call(self.token, tool, arguments)
        assert self.session is not None
        body = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        headers = _session_headers(self.token, self.session)
        assert headers["MCP-Protocol-Version"] == SESSION_VERSION
        return await self.h.mcp.post(json.dumps(body).encode(), headers)


def sample_arguments(tool: str, workspace: uuid.UUID) -> dict[str, Any]:
    """Valid-looking arguments (a wrong id only makes NOT_FOUND, which comes last)."""
    if tool == "get_many_workspaces":
        return {}
    arguments: dict[str, Any] = {"workspaceId": str(workspace)}
    if tool == "get_execution":
        arguments["executionId"] = str(uuid.uuid4())
    if tool == "get_workflow":
        arguments["workflowId"] = str(uuid.uuid4())
    return arguments


async def spend_budget(era: Era, workspace: uuid.UUID) -> None:
    for _ in range(20):
        reply = await era.call(
            "get_many_workspaces", sample_arguments("get_many_workspaces", workspace)
        )
        if reply.status == 429:
            return
    raise AssertionError("the rate budget was never spent")


def refused(reply: Reply, status: int, error: str) -> None:
    check_answer(reply)
    assert reply.status == status, reply.body[:300]
    assert f'error="{error}"' in reply.headers["WWW-Authenticate"], reply.headers
    assert "structuredContent" not in reply.body.decode()


async def _revoke(h: Hostile, g: Granted) -> None:
    await h.app[DB_POOL].execute(
        "UPDATE approvals SET revoked_at = now() WHERE id = $1", g.approval_id
    )


async def _expire(h: Hostile, g: Granted) -> None:
    await h.app[DB_POOL].execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = $1", g.approval_id
    )


ENDINGS: dict[str, Callable[[Hostile, Granted], Awaitable[None]]] = {
    "revoked": _revoke,
    "expired": _expire,
}


@pytest.mark.parametrize("era_name", ["modern", "session"])
@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_an_ended_approval_with_a_spent_budget_is_401_on_every_tool(
    make_hostile: HostileFactory, era_name: str, ending: str
) -> None:
    h = await make_hostile(LIMIT_APPROVAL_PER_MINUTE=BUDGET)
    a = h.world.approvals["a"]
    era = Era(h, a.token, era_name)
    await era.open()
    await spend_budget(era, a.workspaces[0])
    for tool in tool_names(h):  # a live approval over its budget: 429, before arguments
        reply = await era.call(tool, {"workspaceId": "not-a-uuid"})
        assert reply.status == 429, (tool, reply.body[:300])
    await ENDINGS[ending](h, a)
    for tool in tool_names(h):
        for arguments in (sample_arguments(tool, a.workspaces[0]), {"workspaceId": "nope"}):
            refused(await era.call(tool, arguments), 401, "invalid_token")


@pytest.mark.parametrize("era_name", ["modern", "session"])
async def test_a_missing_scope_with_a_spent_budget_is_403_and_revoked_401(
    make_hostile: HostileFactory, era_name: str
) -> None:
    h = await make_hostile(LIMIT_APPROVAL_PER_MINUTE=BUDGET)
    a = h.world.approvals["a"]
    async with h.app[DB_POOL].acquire() as conn:
        approval = await grant_approval(
            conn,
            account_id=a.account_id,
            client_id=await create_operator_client(conn, "workspaces-only"),
            workspace_ids=a.workspaces,
            scopes="workspaces:read",
            expires="1d",
        )
        token = (await issue_tokens(conn, h.app[TOKENS], approval)).access_token
    era = Era(h, token, era_name)
    await era.open()
    await spend_budget(era, a.workspaces[0])
    catalog = h.app[CATALOG]
    needing_n8n = [t for t in tool_names(h) if getattr(catalog.tool(t), "scope", "") == N8N_READ]
    assert len(needing_n8n) >= 5
    for tool in needing_n8n:
        refused(await era.call(tool, {"workspaceId": "nope"}), 403, "insufficient_scope")
    await h.app[DB_POOL].execute(
        "UPDATE approvals SET revoked_at = now() WHERE id = $1", approval.id
    )
    for tool in tool_names(h):
        refused(await era.call(tool, {"workspaceId": "nope"}), 401, "invalid_token")


@pytest.mark.parametrize("era_name", ["modern", "session"])
async def test_a_refusal_overlapping_a_tool_that_read_a_revoked_approval_is_401(
    make_hostile: HostileFactory, era_name: str
) -> None:
    """With overlapped admission on and nothing refused yet, the admission's Redis call
    overlaps the tool (docs/decisions/limits.md, Overlapped admission): the tool's own
    statement reads the approval revoked, the admission refuses the spent budget, and 401
    is the answer, not 429."""
    h = await make_hostile(LIMIT_APPROVAL_PER_MINUTE=BUDGET, ADMISSION_OVERLAP="true")
    a = h.world.approvals["a"]
    era = Era(h, a.token, era_name)
    await era.open()
    arguments = sample_arguments("get_many_executions", a.workspaces[0])
    for _ in range(int(BUDGET)):
        reply = await era.call("get_many_executions", arguments)
        assert reply.status == 200, reply.body[:300]
        if reply.headers["RateLimit"].startswith('"approval";r=0;'):
            break
    else:
        raise AssertionError("the rate budget was never used up")
    await _revoke(h, a)
    refused(await era.call("get_many_executions", arguments), 401, "invalid_token")
    refused(await era.call("get_execution_stats", {"workspaceId": "nope"}), 401, "invalid_token")
