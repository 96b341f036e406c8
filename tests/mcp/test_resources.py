"""The MCP Apps views on the wire: resources/list lists their ui:// documents, resources/read
returns each as one self-contained HTML document, authorized like every method, with the
2026-07-28 Mcp-Name header checked against the uri (docs/views.md)."""

from __future__ import annotations

import base64
import re
from typing import Any

import pytest

from service.app_keys import DB_POOL
from service.auth.approvals import revoke_approval
from tests.mcp.conftest import EXPECTED_SERVER_INFO, Wire

MIME = "text/html;profile=mcp-app"
URIS = [
    "ui://elova-mcp/execution.html",
    "ui://elova-mcp/execution-stats.html",
    "ui://elova-mcp/executions.html",
]
NO_DOMAINS: dict[str, list[str]] = {
    "connectDomains": [],
    "resourceDomains": [],
    "frameDomains": [],
    "baseUriDomains": [],
}
# What would make a browser fetch from another origin: an external src/href/action, a CSS
# import or url(), a <base>. (A URL inside a script's string is not a request; the browser
# test counts the requests a view makes under the spec's CSP: tests/views.)
EXTERNAL = re.compile(
    r"""(?:\b(?:src|href|action|srcset|poster|data)\s*=\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//)"""
    r"""|@import|url\(\s*["']?\s*(?:[a-z][a-z0-9+.-]*:)?//|<base\b|<link\b""",
    re.IGNORECASE,
)


async def _read(wire: Wire, uri: str, *, name: str | None = None, **extra: str) -> Any:
    headers = wire.modern_headers("resources/read", uri if name is None else name, **extra)
    return await wire.post(wire.modern_body("resources/read", {"uri": uri}), headers)


async def test_resources_list_names_the_three_views(wire: Wire) -> None:
    resp = await wire.modern("resources/list")
    assert resp.status == 200
    result = (await resp.json())["result"]
    listed = result.pop("resources")
    assert [r["uri"] for r in listed] == URIS
    for entry in listed:
        assert set(entry) == {"uri", "name", "title", "description", "mimeType"}
        assert entry["mimeType"] == MIME and entry["name"] and entry["description"]
    assert result == {
        "resultType": "complete",
        "ttlMs": 300000,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": EXPECTED_SERVER_INFO},
    }


@pytest.mark.parametrize("uri", URIS)
async def test_read_returns_one_self_contained_html_document(wire: Wire, uri: str) -> None:
    resp = await _read(wire, uri)
    assert resp.status == 200, await resp.text()
    result = (await resp.json())["result"]
    assert result["resultType"] == "complete"
    [content] = result["contents"]
    assert set(content) == {"uri", "mimeType", "text", "_meta"}
    assert content["uri"] == uri and content["mimeType"] == MIME
    assert content["_meta"] == {"ui": {"csp": NO_DOMAINS, "prefersBorder": True}}
    html: str = content["text"]
    assert html.lstrip().lower().startswith("<!doctype html>")
    assert html.rstrip().lower().endswith("</html>")
    assert len(html.encode()) <= 512 * 1024
    assert EXTERNAL.search(html) is None, EXTERNAL.search(html)
    assert "eval(" not in html and "new Function" not in html


async def test_the_three_views_are_one_document(wire: Wire) -> None:
    """One document picks its view at run time (docs/views.md): the SDK once, not thrice."""
    texts = []
    for uri in URIS:
        resp = await _read(wire, uri)
        texts.append((await resp.json())["result"]["contents"][0]["text"])
    assert texts[0] == texts[1] == texts[2]


async def test_read_in_a_session(wire: Wire) -> None:
    sid = await wire.initialize()
    resp = await wire.legacy(sid, "resources/read", {"uri": URIS[0]}, request_id=7)
    answer = await resp.json()
    assert resp.status == 200 and answer["id"] == 7
    assert list(answer["result"]) == ["contents"]  # no 2026-07-28 fields in a session
    assert answer["result"]["contents"][0]["mimeType"] == MIME


async def test_read_without_a_token_is_401(wire: Wire) -> None:
    headers = wire.modern_headers("resources/read", URIS[0])
    del headers["Authorization"]
    resp = await wire.post(wire.modern_body("resources/read", {"uri": URIS[0]}), headers)
    assert resp.status == 401
    assert resp.headers["WWW-Authenticate"].startswith("Bearer")
    resp = await _read(wire, URIS[0], Authorization="Bearer not-a-token")
    assert resp.status == 401


async def test_read_of_a_revoked_approval_is_401(wire: Wire) -> None:
    assert wire.approval_id is not None
    async with wire.app[DB_POOL].acquire() as conn:
        assert await revoke_approval(conn, wire.approval_id)
    resp = await _read(wire, URIS[0])
    assert resp.status == 401
    assert "contents" not in await resp.text()


async def test_read_needs_the_name_header_equal_to_the_uri(wire: Wire) -> None:
    body = wire.modern_body("resources/read", {"uri": URIS[0]})
    headers = wire.modern_headers("resources/read")  # no Mcp-Name
    resp = await wire.post(body, headers)
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert error["code"] == -32020 and "Mcp-Name" in error["message"]
    resp = await _read(wire, URIS[0], name=URIS[1])
    assert resp.status == 400
    assert (await resp.json())["error"]["code"] == -32020
    # The header may carry the uri in the Base64 sentinel form.
    encoded = "=?base64?" + base64.b64encode(URIS[0].encode()).decode() + "?="
    resp = await _read(wire, URIS[0], name=encoded)
    assert resp.status == 200


@pytest.mark.parametrize("uri", ["ui://elova-mcp/nothing.html", "file:///etc/passwd", ""])
async def test_an_unknown_uri_is_invalid_params(wire: Wire, uri: str) -> None:
    resp = await _read(wire, uri)
    assert resp.status == 200
    error = (await resp.json())["error"]
    assert error["code"] == -32602 and error["data"] == {"uri": uri}


async def test_read_without_a_uri_is_invalid_params(wire: Wire) -> None:
    sid = await wire.initialize()
    resp = await wire.legacy(sid, "resources/read", {}, request_id=8)
    assert (await resp.json())["error"]["code"] == -32602
