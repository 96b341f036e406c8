"""The official Python client (mcp 2.x) against a real listening server, in its default
(modern: server/discover first) and legacy (initialize + session) modes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from aiohttp import web
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from service.app import create_app
from service.app_keys import CATALOG
from service.config import Config
from tests.mcp.conftest import approve


@pytest.fixture
async def served(config: Config) -> AsyncIterator[dict[str, Any]]:
    app = create_app(config)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        granted = await approve(app)
        yield {"url": f"http://127.0.0.1:{port}/mcp", "app": app, **granted}
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_official_client_lists_and_calls(served: dict[str, Any], mode: str) -> None:
    headers = {"Authorization": f"Bearer {served['token']}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(served["url"], http_client=http)
        async with Client(transport, mode=mode) as client:
            expected = "2026-07-28" if mode == "auto" else "2025-11-25"
            assert client.session.protocol_version == expected
            listed = await client.list_tools()
            assert [t.name for t in listed.tools] == list(served["app"][CATALOG].names)
            result = await client.call_tool("get_many_workspaces", {"limit": 5})
            assert result.is_error is False, result
            assert result.structured_content is not None
            ids = [w["id"] for w in result.structured_content["workspaces"]]
            assert ids == [str(served["workspace_id"])]
            bad = await client.call_tool("get_workspace", {"workspaceId": "not-a-uuid"})
            assert bad.is_error is True
            assert bad.content[0].text.startswith("VALIDATION_ERROR: ")  # type: ignore[union-attr]
