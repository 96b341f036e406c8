"""A browser opening the printed /mcp URL gets a page saying what it is and how to connect
(issue 54); every client's GET keeps the JSON 405 it had, byte for byte."""

from __future__ import annotations

import re

from tests.mcp.conftest import Wire

# What Chromium and Firefox send for a navigation.
BROWSER_ACCEPT = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,*/*;q=0.8"
)
REFUSAL = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Method Not Allowed"}}'


async def test_a_browser_gets_a_page_naming_the_url_and_the_docs(wire: Wire) -> None:
    resp = await wire.client.get("/mcp", headers={"Accept": BROWSER_ACCEPT})
    assert resp.status == 200
    assert resp.content_type == "text/html"
    page = await resp.text()
    assert "<code>http://127.0.0.1:8080/mcp</code>" in page
    assert 'href="https://docs.elova.dev/"' in page
    assert 'href="/oauth/elova.css"' in page  # the service's other pages' style
    assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
    assert resp.headers["Cache-Control"] == "no-store"
    assert re.search(r"<title>MCP endpoint · Elova</title>", page)


async def test_clients_get_keeps_its_405(wire: Wire) -> None:
    for accept in ("text/event-stream", "text/html, text/event-stream", "application/json", ""):
        resp = await wire.client.get("/mcp", headers={"Accept": accept})
        assert resp.status == 405, accept
        assert await resp.read() == REFUSAL
        assert resp.headers["Allow"] == "POST, DELETE, OPTIONS"
        assert resp.content_type == "application/json"
    # a session's GET (a client resuming a stream) is a client's, whatever its Accept says
    headers = {"Accept": BROWSER_ACCEPT, "Mcp-Session-Id": "s"}
    resp = await wire.client.get("/mcp", headers=headers)
    assert (resp.status, await resp.read()) == (405, REFUSAL)


async def test_other_methods_from_a_browser_are_unchanged(wire: Wire) -> None:
    resp = await wire.client.put("/mcp", data=b"{}", headers={"Accept": BROWSER_ACCEPT})
    assert (resp.status, await resp.read()) == (405, REFUSAL)
