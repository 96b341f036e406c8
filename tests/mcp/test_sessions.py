"""Revisions 2025-11-25 and 2025-06-18: initialize, sessions bound to an approval, expiry,
DELETE that ends a session on every replica."""

from __future__ import annotations

import time
import uuid

import pytest

from service.app import create_app
from service.app_keys import SESSIONS
from service.config import Config
from service.mcp.sessions import SessionStore
from tests.mcp.conftest import EXPECTED_SERVER_INFO, ClientFactory, Wire, approve


async def test_initialize_golden(wire: Wire) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    resp = await wire.post(body, wire.base_headers())
    assert resp.status == 200
    session_id = resp.headers["Mcp-Session-Id"]
    assert all(0x21 <= ord(c) <= 0x7E for c in session_id)
    answer = await resp.json()
    result = answer["result"]
    assert answer["id"] == 0
    assert result["protocolVersion"] == "2025-11-25"
    assert result["capabilities"] == {
        "tools": {},
        "resources": {},
        "extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}},
    }
    assert result["serverInfo"] == EXPECTED_SERVER_INFO
    assert "resultType" not in result and "_meta" not in result


@pytest.mark.parametrize(
    "asked, agreed",
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-11-25"),
        ("2024-11-05", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
    ],
)
async def test_initialize_negotiates(wire: Wire, asked: str, agreed: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": asked,
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    resp = await wire.post(body, wire.base_headers())
    assert (await resp.json())["result"]["protocolVersion"] == agreed


async def test_initialize_without_protocol_version_is_invalid_params(wire: Wire) -> None:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"capabilities": {}}}
    resp = await wire.post(body, wire.base_headers())
    assert (await resp.json())["error"]["code"] == -32602


async def test_session_requests(wire: Wire) -> None:
    sid = await wire.initialize()
    resp = await wire.legacy(sid, "notifications/initialized", request_id=None)
    assert resp.status == 202 and await resp.read() == b""
    resp = await wire.legacy(sid, "ping", request_id=2)
    assert await resp.json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    resp = await wire.legacy(sid, "tools/list", request_id=3)
    result = (await resp.json())["result"]
    assert list(result) == ["tools"]  # no 2026-07-28 fields in a session
    assert len(result["tools"]) == 9
    for method, key in [
        ("prompts/list", "prompts"),
        ("resources/templates/list", "resourceTemplates"),
    ]:
        resp = await wire.legacy(sid, method, request_id=4)
        assert (await resp.json())["result"] == {key: []}
    # resources/list: the views' ui:// documents (tests/mcp/test_resources.py).
    resp = await wire.legacy(sid, "resources/list", request_id=4)
    listed = (await resp.json())["result"]
    assert list(listed) == ["resources"]
    assert [r["uri"] for r in listed["resources"]] == [
        "ui://elova-mcp/execution.html",
        "ui://elova-mcp/execution-stats.html",
        "ui://elova-mcp/executions.html",
    ]


async def test_unknown_method_in_a_session_is_200_with_error(wire: Wire) -> None:
    sid = await wire.initialize()
    resp = await wire.legacy(sid, "server/discover", request_id=5)
    assert resp.status == 200
    assert (await resp.json())["error"]["code"] == -32601


async def test_2025_06_18_session_and_2025_03_26_header(wire: Wire) -> None:
    sid = await wire.initialize("2025-06-18")
    assert (await wire.legacy(sid, "ping", version="2025-06-18")).status == 200
    assert (await wire.legacy(sid, "ping", version="2025-03-26")).status == 200
    resp = await wire.legacy(sid, "ping", version="2025-11-25")
    assert resp.status == 400


async def test_protocol_version_header_may_be_absent_in_a_session(wire: Wire) -> None:
    sid = await wire.initialize()
    headers = wire.base_headers(**{"Mcp-Session-Id": sid})
    resp = await wire.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers)
    assert resp.status == 200


async def test_request_without_session_is_400(wire: Wire) -> None:
    resp = await wire.post({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, wire.base_headers())
    assert resp.status == 400
    assert "Mcp-Session-Id" in (await resp.json())["error"]["message"]


@pytest.mark.parametrize("bogus", ["nope", "A" * 67, ""])
async def test_unknown_session_is_404(wire: Wire, bogus: str) -> None:
    resp = await wire.legacy(bogus, "ping")
    assert resp.status == 404


async def test_tampered_session_is_404(wire: Wire) -> None:
    sid = await wire.initialize()
    flipped = sid[:-2] + ("A" if sid[-2] != "A" else "B") + sid[-1]
    assert (await wire.legacy(flipped, "ping")).status == 404


async def test_session_of_another_approval_is_404(wire: Wire) -> None:
    sid = await wire.initialize()
    other = await approve(wire.app)
    headers = wire.base_headers(
        **{"Mcp-Session-Id": sid, "Authorization": f"Bearer {other['token']}"}
    )
    resp = await wire.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers)
    assert resp.status == 404


async def test_expired_session_is_404(wire: Wire) -> None:
    assert wire.approval_id is not None
    store: SessionStore = wire.app[SESSIONS]
    stale = store.issue("2025-11-25", wire.approval_id, now=time.time() - store.ttl_seconds - 1)
    assert (await wire.legacy(stale, "ping")).status == 404
    fresh = store.issue("2025-11-25", wire.approval_id)
    assert (await wire.legacy(fresh, "ping")).status == 200


async def test_session_needs_a_token(wire: Wire) -> None:
    sid = await wire.initialize()
    headers = wire.base_headers(**{"Mcp-Session-Id": sid})
    del headers["Authorization"]
    resp = await wire.post({"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers)
    assert resp.status == 401


async def test_delete_ends_the_session_on_every_replica(
    wire: Wire, aiohttp_client: ClientFactory, config: Config
) -> None:
    replica = await aiohttp_client(create_app(config))  # shares only PostgreSQL and the key
    sid = await wire.initialize()
    headers = wire.base_headers(**{"Mcp-Session-Id": sid})
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert (await replica.post("/mcp", json=ping, headers=headers)).status == 200

    resp = await wire.client.delete("/mcp", headers=headers)
    assert resp.status == 204

    assert (await wire.legacy(sid, "ping")).status == 404
    assert (await replica.post("/mcp", json=ping, headers=headers)).status == 404
    assert (await replica.delete("/mcp", headers=headers)).status == 404
    notification = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await replica.post("/mcp", json=notification, headers=headers)).status == 404
    # A new session works at once.
    assert (await wire.legacy(await wire.initialize(), "ping")).status == 200


async def test_delete_refusals(wire: Wire) -> None:
    assert (await wire.client.delete("/mcp", headers=wire.base_headers())).status == 400
    headers = wire.base_headers(**{"Mcp-Session-Id": "forged"})
    assert (await wire.client.delete("/mcp", headers=headers)).status == 404
    sid = await wire.initialize()
    no_token = {"Mcp-Session-Id": sid}
    assert (await wire.client.delete("/mcp", headers=no_token)).status == 401


def test_session_ids_verify_only_with_their_key_and_approval() -> None:
    key, other_key = b"k" * 32, b"o" * 32
    approval = uuid.uuid4()
    store = SessionStore(key)
    sid = store.issue("2025-06-18", approval)
    opened = store.verify(sid, approval)
    assert opened is not None and opened.protocol_version == "2025-06-18"
    assert store.verify(sid, uuid.uuid4()) is None
    assert SessionStore(other_key).verify(sid, approval) is None
    # After a key rotation the previous key still verifies until the ids expire.
    assert SessionStore(other_key, previous=[key]).verify(sid, approval) is not None
    assert store.verify(sid + "A", approval) is None
