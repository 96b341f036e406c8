"""The official Python client's OAuth support (mcp 2.x `OAuthClientProvider`) completes the
whole flow against the real server: discovery, registration, PKCE, `iss` validation, token
exchange, then a tool call. The browser step is scripted with HTTP requests: the redirect
handler signs in and approves like a person, the callback handler hands back the code."""

from __future__ import annotations

import aiohttp
import httpx2
from mcp.client import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from service.app_keys import DB_POOL
from tests.auth.flow import forms, hidden, query_of, seed_account
from tests.support.server import InProcessServer
from tests.support.services import TestDatabase

REDIRECT = "http://127.0.0.1:47321/callback"


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class ScriptedBrowser:
    """Signs in and approves the first workspace with plain HTTP, as a person would."""

    def __init__(self, email: str, password: str) -> None:
        self.email, self.password = email, password
        self.result: AuthorizationCodeResult | None = None
        self.approval_page = ""

    async def redirect_handler(self, authorization_url: str) -> None:
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for a 127.0.0.1 server
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            async with http.get(authorization_url) as resp:  # → sign-in page
                assert resp.status == 200 and "/signin" in str(resp.url)
                signin_fields = dict(hidden(await resp.text()))
            form = {**signin_fields, "email": self.email, "password": self.password}
            async with http.post(str(resp.url.with_query(None)), data=form) as page:
                assert page.status == 200, await page.text()  # followed back to /authorize
                self.approval_page = await page.text()
                base = page.url
            approve = forms(self.approval_page)[0]
            fields = list(approve["fields"])
            fields += [(n, v) for n, v, checked in approve["options"] if checked]
            if not any(n == "workspace" for n, _ in fields):
                first = next(v for n, v, _ in approve["options"] if n == "workspace")
                fields.append(("workspace", first))
            fields.append(("decision", "approve"))
            async with http.post(
                base.with_path("/authorize").with_query(None), data=fields, allow_redirects=False
            ) as done:
                assert done.status == 303, await done.text()
                answer = query_of(done.headers["Location"])
        assert done.headers["Location"].startswith(REDIRECT)
        self.result = AuthorizationCodeResult(
            code=answer["code"], state=answer.get("state"), iss=answer.get("iss")
        )

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.result is not None
        return self.result


async def test_official_client_oauth_flow_then_tool_call(test_database: TestDatabase) -> None:
    async with InProcessServer(test_database.dsn) as server:
        account = await seed_account(server.apps[0][DB_POOL], workspaces=2)
        browser = ScriptedBrowser(account.email, account.password)
        storage = MemoryStorage()
        provider = OAuthClientProvider(
            server.mcp_url,
            OAuthClientMetadata(
                client_name="Official Python client",
                redirect_uris=[REDIRECT],  # type: ignore[list-item]
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
                token_endpoint_auth_method="none",
            ),
            storage,
            redirect_handler=browser.redirect_handler,
            callback_handler=browser.callback_handler,
        )
        async with httpx2.AsyncClient(auth=provider) as http:
            transport = streamable_http_client(server.mcp_url, http_client=http)
            async with Client(transport) as client:
                result = await client.call_tool("get_many_workspaces", {"limit": 5})
        assert "Official Python client" in browser.approval_page
        assert result.is_error is False, result
        assert result.structured_content is not None
        ids = [w["id"] for w in result.structured_content["workspaces"]]
        assert len(ids) == 1 and ids[0] in account.workspaces
        assert storage.tokens is not None and storage.tokens.refresh_token
        assert storage.client is not None and storage.client.client_id.startswith("dyn_")
