"""The HTTP ladder of /mcp before any method runs: origin, method, media types, size,
JSON-RPC envelope, authentication. Golden exchanges over the real app."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tests.mcp.conftest import MODERN, Wire, WireFactory


async def test_foreign_origin_is_403_before_anything_else(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list", Origin="http://evil.example.com")
    headers.pop("Authorization")
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 403
    assert (await resp.json())["error"]["code"] == -32600
    assert (await resp.json())["id"] is None


async def test_rebinding_host_is_403(wire: Wire) -> None:
    # What the conformance scenario dns-rebinding-protection sends.
    headers = wire.base_headers(Host="evil.example.com", Origin="http://evil.example.com")
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "conformance-dns-rebinding-test", "version": "1.0.0"},
        },
    }
    resp = await wire.post(body, headers)
    assert resp.status == 403
    resp = await wire.post(body, wire.base_headers(Host="evil.example.com"))
    assert resp.status == 403


async def test_configured_origin_and_loopback_host_are_served(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list", Origin="http://127.0.0.1:8080", Host="localhost:9")
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:8080"
    assert "Mcp-Session-Id" in resp.headers["Access-Control-Expose-Headers"]


async def test_get_is_405_with_allow(wire: Wire) -> None:
    resp = await wire.client.get("/mcp", headers={"Accept": "text/event-stream"})
    assert resp.status == 405
    assert "POST" in resp.headers["Allow"] and "DELETE" in resp.headers["Allow"]
    resp = await wire.client.put("/mcp", data=b"{}")
    assert resp.status == 405


async def test_cors_preflight_from_allowed_origin_needs_no_token(wire: Wire) -> None:
    resp = await wire.client.options(
        "/mcp",
        headers={
            "Origin": "http://127.0.0.1:8080",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, mcp-protocol-version",
        },
    )
    assert resp.status == 204
    assert resp.headers["Access-Control-Allow-Origin"] == "http://127.0.0.1:8080"
    assert "authorization" in resp.headers["Access-Control-Allow-Headers"]


@pytest.mark.parametrize(
    "accept, status",
    [
        ("text/event-stream", 406),
        ("text/html, application/xml", 406),
        ("application/json;q=0, text/event-stream", 406),
        ("application/json, text/event-stream", 200),
        ("*/*", 200),
        ("application/*;q=0.5", 200),
    ],
)
async def test_accept(wire: Wire, accept: str, status: int) -> None:
    resp = await wire.post(
        wire.modern_body("tools/list"), wire.modern_headers("tools/list", Accept=accept)
    )
    assert resp.status == status


async def test_missing_accept_means_anything(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list")
    del headers["Accept"]
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 200


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_content_type_must_be_json(wire: Wire, content_type: str | None) -> None:
    headers = wire.modern_headers("tools/list")
    if content_type is None:
        del headers["Content-Type"]
    else:
        headers["Content-Type"] = content_type
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 415


async def test_json_with_charset_is_json(wire: Wire) -> None:
    headers = wire.modern_headers(
        "tools/list", **{"Content-Type": "application/json; charset=utf-8"}
    )
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 200


async def test_body_over_the_bound_is_413(wire: Wire) -> None:
    body = wire.modern_body("tools/list")
    body["params"]["padding"] = "x" * (32 * 1024)
    resp = await wire.post(body, wire.modern_headers("tools/list"))
    assert resp.status == 413
    assert (await resp.json())["error"]["message"].startswith("Payload Too Large")


async def test_chunked_body_over_the_bound_is_413(wire: Wire) -> None:
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        nonlocal sent
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
        for _ in range(64):
            sent += 1024
            yield b"x" * 1024
        yield b'"}}'

    resp = await wire.client.post("/mcp", data=chunks(), headers=wire.modern_headers("tools/list"))
    assert resp.status == 413


async def test_body_at_the_bound_is_read(wire: Wire) -> None:
    body = wire.modern_body("tools/list")
    raw = json.dumps(body).encode()
    body["_pad"] = "x" * (32 * 1024 - len(raw) - len(', "_pad": ""'))
    data = json.dumps(body).encode()
    assert len(data) == 32 * 1024
    resp = await wire.post(data, wire.modern_headers("tools/list"))
    assert resp.status == 200


@pytest.mark.parametrize(
    "data, code",
    [
        (b"{not json", -32700),
        (b"", -32700),
        (b"[1, 2", -32700),
        (b'[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]', -32600),
        (b'{"jsonrpc":"1.0","id":1,"method":"tools/list"}', -32600),
        (b'{"jsonrpc":"2.0","id":null,"method":"tools/list"}', -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"tools/list"}', -32600),
        (b'{"jsonrpc":"2.0","id":1}', -32600),
        (b'{"jsonrpc":"2.0","id":1,"result":{}}', -32600),
        (b'"tools/list"', -32600),
    ],
)
async def test_malformed_messages_are_400(wire: Wire, data: bytes, code: int) -> None:
    resp = await wire.post(data, wire.modern_headers("tools/list"))
    assert resp.status == 400
    answer = await resp.json()
    assert answer == {"jsonrpc": "2.0", "id": None, "error": answer["error"]}
    assert answer["error"]["code"] == code


async def test_no_token_is_401_with_challenge(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list")
    del headers["Authorization"]
    resp = await wire.post(wire.modern_body("tools/list", request_id="a"), headers)
    assert resp.status == 401
    challenge = resp.headers["WWW-Authenticate"]
    assert challenge.startswith("Bearer ")
    assert (
        'resource_metadata="http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp"'
        in challenge
    )
    answer = await resp.json()
    assert answer["id"] == "a" and answer["error"]["code"] == 401


async def test_garbage_token_is_401(wire: Wire) -> None:
    headers = wire.modern_headers("tools/list", Authorization="Bearer not.a.jwt")
    resp = await wire.post(wire.modern_body("tools/list"), headers)
    assert resp.status == 401
    assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]


async def test_notifications_need_a_token_too(wire: Wire) -> None:
    body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    headers = wire.modern_headers("notifications/cancelled")
    del headers["Authorization"]
    assert (await wire.post(body, headers)).status == 401


async def test_every_answer_carries_a_request_id(wire: Wire) -> None:
    resp = await wire.modern("tools/list")
    assert len(resp.headers["X-Request-Id"]) >= 16
    resp = await wire.client.get("/mcp")
    assert resp.headers["X-Request-Id"]


async def test_unknown_version_header_without_meta_is_32022(wire: Wire) -> None:
    headers = wire.base_headers(
        **{"MCP-Protocol-Version": "1900-01-01", "Mcp-Method": "tools/list"}
    )
    resp = await wire.post({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, headers)
    assert resp.status == 400
    assert await resp.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": [MODERN, "2025-11-25", "2025-06-18"], "requested": "1900-01-01"},
        },
    }


async def test_refused_origin_gets_no_cors_grant(wire: Wire) -> None:
    resp = await wire.post(
        wire.modern_body("tools/list"),
        wire.modern_headers("tools/list", Origin="https://evil.example.com"),
    )
    assert resp.status == 403
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_a_large_body_arriving_in_parts_is_read_whole(make_wire: WireFactory) -> None:
    """A body over the size the body deadline waits for (64 KiB) is read by the handler as
    it comes: its first part from the buffer, the rest as it arrives."""
    wire = await make_wire(MAX_BODY_BYTES=str(256 * 1024))
    body = wire.modern_body("tools/list")
    body["_pad"] = "x" * (100 * 1024)
    data = json.dumps(body).encode()
    whole = await wire.post(data, wire.modern_headers("tools/list"))
    assert whole.status == 200
    expected = await whole.json()

    headers = {**wire.modern_headers("tools/list"), "Content-Length": str(len(data))}
    server = wire.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    try:
        head = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k.lower() != "host")
        writer.write(f"POST /mcp HTTP/1.1\r\nHost: localhost\r\n{head}\r\n".encode())
        writer.write(data[: 30 * 1024])
        await writer.drain()
        await asyncio.sleep(0.2)  # the handler has begun reading: the rest comes later
        writer.write(data[30 * 1024 :])
        await writer.drain()
        status_line = await reader.readline()
        assert status_line.startswith(b"HTTP/1.1 200"), status_line
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answer = json.loads(await reader.readexactly(length))
    finally:
        writer.close()
    assert answer == expected
