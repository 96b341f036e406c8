"""The official Python client (`mcp` 2.x) against the running `elova-mcp serve`: in its default
mode (it probes `server/discover` and speaks 2026-07-28) and in legacy mode (initialize and a
session), with the bearer header on its own httpx client. Lists the tools and calls every
one of them with real records."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.clients.checks import (
    EXPECTED_VERSION,
    check_listing,
    check_not_found,
    check_result,
    plan,
    slow_workspaces_until_waiting,
    validate_output,
    wire,
)
from tests.clients.conftest import IssueToken
from tests.clients.dataset import Dataset
from tests.support.server import ServeProcesses
from tests.support.services import TestDatabase


def _c(cursor: str | None) -> dict[str, str]:
    return {} if cursor is None else {"cursor": cursor}


def check_page(result: dict[str, Any]) -> dict[str, Any]:
    assert result.get("isError") in (None, False), result
    page: dict[str, Any] = result["structuredContent"]
    validate_output("get_many_executions", page)
    assert len(page["executions"]) == 1
    return page


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_python_client_lists_and_calls_every_tool(
    elova: ServeProcesses, dataset: Dataset, issue_token: IssueToken, mode: str
) -> None:
    headers = {"Authorization": f"Bearer {await issue_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(elova.mcp_url, http_client=http), mode=mode) as client,
    ):
        assert client.protocol_version == EXPECTED_VERSION[mode]
        assert client.server_capabilities.tools is not None

        listed = await client.list_tools()
        assert listed.next_cursor is None
        check_listing([wire(t) for t in listed.tools])

        results = {}
        for tool, arguments in plan(dataset):
            result = await client.call_tool(tool, arguments)
            results[tool] = check_result(tool, wire(result), dataset)

        # Opaque cursors survive the client: one row a page, every row once, same order.
        walked, cursor = [], None
        while True:
            args = {"workspaceId": dataset.workspace_id, "limit": 1}
            page = wire(await client.call_tool("get_many_executions", args | _c(cursor)))
            out = check_page(page)
            walked += [e["id"] for e in out["executions"]]
            if (cursor := out["nextCursor"]) is None:
                break
        assert walked == [e["id"] for e in results["get_many_executions"]["executions"]]

        # A workspace that exists but is not granted reads exactly like one that does not.
        for workspace in (dataset.foreign_workspace_id, "0b6f0a4e-5d1c-4c0e-9a53-2f9d7a3c1e00"):
            refused = await client.call_tool("get_workspace", {"workspaceId": workspace})
            check_not_found(wire(refused))


async def test_python_client_without_a_token_is_refused(elova: ServeProcesses) -> None:
    """No bearer: the client cannot connect, in either mode (401 before anything else)."""
    async with httpx2.AsyncClient(timeout=30) as http:
        for mode in ("auto", "legacy"):
            with pytest.raises(Exception) as caught:  # the SDK wraps the 401 its own way
                async with Client(
                    streamable_http_client(elova.mcp_url, http_client=http), mode=mode
                ):
                    pass
            assert "401" in repr(caught.value) or "nauthorized" in repr(caught.value)


async def test_python_client_parallel_calls_on_one_approval_are_all_answered(
    elova: ServeProcesses, dataset: Dataset, issue_token: IssueToken, test_database: TestDatabase
) -> None:
    """An agent's 4 parallel tool calls on one approval (account cap 2): the client does not
    retry a 429, so every call must be answered: two at once, two after a short wait for a
    slot (issue 39)."""
    headers = {"Authorization": f"Bearer {await issue_token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(elova.mcp_url, http_client=http)) as client,
    ):
        slow = asyncio.create_task(slow_workspaces_until_waiting(test_database.dsn, blocked=2))
        results = await asyncio.gather(
            *(client.call_tool("get_many_workspaces", {}) for _ in range(4))
        )
        await slow
    for result in results:
        check_result("get_many_workspaces", wire(result), dataset)
