"""End to end in a real headless browser (Debian chromium + chromedriver) against the real
server on a loopback port: MCP 401 → protected-resource metadata → authorization-server
metadata → registration → authorize → sign-in → approval page → code → token → tool call →
refresh → reuse of the old refresh token revokes the family → the next MCP call is 401.

Skipped when chromium is not installed, except under CI (the environment variable CI set),
where a missing browser is a failure.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from service.app_keys import DB_POOL
from tests.auth.flow import PASSWORD, bearer, pkce, seed_account, tool_call
from tests.auth.pages.webdriver import Browser, browser_available
from tests.support.server import InProcessServer
from tests.support.services import TestDatabase

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

if not browser_available():
    if os.environ.get("CI"):
        pytest.fail("chromium and chromium-driver are required under CI", pytrace=False)
    pytest.skip("chromium / chromium-driver not installed", allow_module_level=True)


class Callback:
    """The client's loopback redirect URI: records what the browser brings back."""

    def __init__(self) -> None:
        self.received: asyncio.Queue[dict[str, str]] = asyncio.Queue()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        await self.received.put(dict(request.query))
        return web.Response(
            text="<p>Done. You can close this window.</p>", content_type="text/html"
        )


@pytest.fixture
async def callback() -> AsyncIterator[Callback]:
    cb = Callback()
    app = web.Application()
    app.router.add_get("/callback", cb.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    cb.url = f"http://127.0.0.1:{runner.addresses[0][1]}/callback"
    try:
        yield cb
    finally:
        await runner.cleanup()


async def _json(resp: aiohttp.ClientResponse) -> Any:
    assert resp.content_type == "application/json", await resp.text()
    return await resp.json()


@pytest.mark.slow
@pytest.mark.alone  # headless Chromium within the 30 s test bound: it ran past it beside the rest
async def test_browser_flow_end_to_end(test_database: TestDatabase, callback: Callback) -> None:
    async with InProcessServer(test_database.dsn) as server, aiohttp.ClientSession() as http:
        pool = server.apps[0][DB_POOL]
        names = ["Acme <script>alert(1)</script> & Co", "Billing ops", "Zürich team"]
        account = await seed_account(pool, workspaces=3, names=names)
        body, headers = tool_call("get_many_workspaces", {"limit": 10})

        # 1. An MCP call without a token: 401 naming the protected-resource metadata.
        async with http.post(server.mcp_url, json=body, headers=headers) as resp:
            assert resp.status == 401
            challenge = resp.headers["WWW-Authenticate"]
        found = re.search(r'resource_metadata="([^"]+)"', challenge)
        assert found is not None, challenge
        prm_url = found[1]
        async with http.get(prm_url) as resp:
            prm = await _json(resp)
        assert prm["resource"] == server.mcp_url
        issuer = prm["authorization_servers"][0]

        # 2. Authorization-server metadata (RFC 8414) at the issuer's well-known URL.
        async with http.get(issuer + "/.well-known/oauth-authorization-server") as resp:
            asm = await _json(resp)
        assert asm["issuer"] == issuer
        assert asm["code_challenge_methods_supported"] == ["S256"]

        # 3. Dynamic registration of a public client with a loopback redirect URI.
        reg_body = {
            "client_name": "Browser Agent",
            "redirect_uris": [callback.url],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        }
        async with http.post(asm["registration_endpoint"], json=reg_body) as resp:
            assert resp.status == 201
            client_id = (await _json(resp))["client_id"]

        # 4. The browser: authorize → sign in → approval page → approve → callback.
        verifier, challenge_s256 = pkce()
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": callback.url,
            "state": "browser-state-1",
            "code_challenge": challenge_s256,
            "code_challenge_method": "S256",
            "scope": "workspaces:read n8n:read",
            "resource": prm["resource"],
        }
        authorize_url = str(URL(asm["authorization_endpoint"]).with_query(params))
        async with Browser() as browser:
            await browser.get(authorize_url)
            assert "/signin" in await browser.url()
            await browser.screenshot(ARTIFACTS / "oauth-signin-page.png")
            await browser.type("input[name=email]", account.email)
            await browser.type("input[name=password]", PASSWORD)
            await browser.click("button[type=submit]")
            await browser.wait_for_url(issuer + "/authorize")
            page = await browser.source()
            assert "Browser Agent" in page and "127.0.0.1" in page
            assert "personal information" in page
            assert "<script>alert(1)</script>" not in page  # escaped, not markup
            assert "Acme &lt;script&gt;" in page
            boxes = await browser.find_all("input[name=workspace]")
            assert len(boxes) == 3
            for box in boxes[:2]:
                if not await browser.selected(box):
                    await browser.click_element(box)
            await browser.click("input[name=expires][value='1d']")
            await browser.screenshot(ARTIFACTS / "oauth-approval-page.png")
            await browser.click("button[name=decision][value=approve]")
            answer = await asyncio.wait_for(callback.received.get(), timeout=15)
            assert (await browser.url()).startswith(callback.url)
        assert answer["state"] == "browser-state-1"
        assert answer["iss"] == issuer
        code = answer["code"]

        # 5. Code → tokens.
        token_form = {
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": callback.url,
            "code_verifier": verifier,
            "resource": prm["resource"],
        }
        async with http.post(asm["token_endpoint"], data=token_form) as resp:
            assert resp.status == 200, await resp.text()
            first = await _json(resp)
        assert first["expires_in"] <= 300

        # 6. A tool call with the access token sees the two chosen workspaces.
        async with http.post(
            server.mcp_url, json=body, headers=bearer(headers, first["access_token"])
        ) as resp:
            assert resp.status == 200, await resp.text()
            result = (await _json(resp))["result"]
        listed = {w["id"] for w in result["structuredContent"]["workspaces"]}
        assert len(listed) == 2 and listed <= set(account.workspaces)

        # 7. Refresh rotates; reusing the old refresh token revokes the whole family.
        refresh = {
            "grant_type": "refresh_token",
            "client_id": client_id,
            "refresh_token": first["refresh_token"],
        }
        async with http.post(asm["token_endpoint"], data=refresh) as resp:
            assert resp.status == 200
            second = await _json(resp)
        assert second["refresh_token"] != first["refresh_token"]
        async with http.post(
            server.mcp_url, json=body, headers=bearer(headers, second["access_token"])
        ) as resp:
            assert resp.status == 200
        async with http.post(asm["token_endpoint"], data=refresh) as resp:
            assert resp.status == 400
            assert (await _json(resp))["error"] == "invalid_grant"
        async with http.post(
            server.mcp_url, json=body, headers=bearer(headers, second["access_token"])
        ) as resp:
            assert resp.status == 401
            assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
        newer = {**refresh, "refresh_token": second["refresh_token"]}
        async with http.post(asm["token_endpoint"], data=newer) as resp:
            assert resp.status == 400
