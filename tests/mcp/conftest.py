"""Fixtures for the /mcp wire tests: a real app (create_app), a real approval and token.

Each test seeds its own account and workspace (fresh UUIDs), so tests never share rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import DB_POOL, TOKENS
from service.config import Config
from tests.support.approvals import granted, seed_member

MODERN = "2026-07-28"
ClientFactory = Callable[[web.Application], Awaitable[TestClient[web.Request, web.Application]]]


class Wire:
    """One client of /mcp with a real bearer token: builds golden requests of both eras."""

    def __init__(self, client: TestClient[web.Request, web.Application], token: str) -> None:
        self.client = client
        self.token = token
        self.workspace_id: uuid.UUID | None = None
        self.approval_id: uuid.UUID | None = None

    @property
    def app(self) -> web.Application:
        return self.client.app

    def base_headers(self, **extra: str) -> dict[str, str]:
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        headers.update(extra)
        return headers

    async def post(self, body: bytes | dict[str, Any], headers: dict[str, str]) -> Any:
        data = body if isinstance(body, bytes) else msgspec.json.encode(body)
        return await self.client.post("/mcp", data=data, headers=headers)

    def modern_body(
        self, method: str, params: dict[str, Any] | None = None, request_id: Any = 1
    ) -> dict[str, Any]:
        params = dict(params or {})
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
            **params.get("_meta", {}),
        }
        return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}

    def modern_headers(self, method: str, name: str | None = None, **extra: str) -> dict[str, str]:
        headers = self.base_headers(**{"MCP-Protocol-Version": MODERN, "Mcp-Method": method})
        if name is not None:
            headers["Mcp-Name"] = name
        headers.update(extra)
        return headers

    async def modern(
        self, method: str, params: dict[str, Any] | None = None, request_id: Any = 1
    ) -> Any:
        name = (params or {}).get("name")
        return await self.post(
            self.modern_body(method, params, request_id), self.modern_headers(method, name)
        )

    async def initialize(self, version: str = "2025-11-25") -> str:
        body = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "wire-test", "version": "1"},
            },
        }
        resp = await self.post(body, self.base_headers())
        assert resp.status == 200, await resp.text()
        session_id: str = resp.headers["Mcp-Session-Id"]
        return session_id

    async def legacy(
        self,
        session_id: str,
        method: str,
        params: dict[str, Any] | None = None,
        request_id: Any = 1,
        version: str = "2025-11-25",
    ) -> Any:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if request_id is not None:
            body["id"] = request_id
        if params is not None:
            body["params"] = params
        headers = self.base_headers(
            **{"Mcp-Session-Id": session_id, "MCP-Protocol-Version": version}
        )
        return await self.post(body, headers)


async def approve(app: web.Application, scopes: str = "workspaces:read n8n:read") -> dict[str, Any]:
    """A new owner of one workspace, approved for an operator client: its token."""
    who = await seed_member(app[DB_POOL], workspaces=1, role="owner")
    approval, issued = await granted(app[DB_POOL], app[TOKENS], who, scopes=scopes)
    return {
        "token": issued.access_token,
        "approval_id": approval.id,
        "workspace_id": who.workspaces[0],
    }


@pytest.fixture
async def wire(aiohttp_client: ClientFactory, config: Config) -> Wire:
    client = await aiohttp_client(create_app(config))
    granted = await approve(client.app)
    w = Wire(client, granted["token"])
    w.workspace_id = granted["workspace_id"]
    w.approval_id = granted["approval_id"]
    return w


WireFactory = Callable[..., Awaitable[Wire]]


@pytest.fixture
def make_wire(aiohttp_client: ClientFactory, make_config: Callable[..., Config]) -> WireFactory:
    """A Wire on an app built with config overrides (ELOVA_* names without the prefix)."""

    async def build(scopes: str = "workspaces:read n8n:read", **overrides: Any) -> Wire:
        client = await aiohttp_client(create_app(make_config(**overrides)))
        granted = await approve(client.app, scopes)
        w = Wire(client, granted["token"])
        w.workspace_id = granted["workspace_id"]
        w.approval_id = granted["approval_id"]
        return w

    return build


def expected_server_info() -> dict[str, object]:
    """serverInfo as every client sees it: name, version, title, website and an SVG icon."""
    from service import __version__
    from service.mcp.titles import ICON

    assert ICON["src"].startswith("data:image/svg+xml;base64,")
    return {
        "name": "elova-mcp",
        "version": __version__,
        "title": "Elova",
        "websiteUrl": "https://docs.elova.dev/",
        "icons": [ICON],
    }


EXPECTED_SERVER_INFO = expected_server_info()
