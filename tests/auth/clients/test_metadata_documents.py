"""Client ID Metadata Documents: a client whose `client_id` is the URL of its metadata
document, served here by a local aiohttp server (ELOVA_OAUTH_CIMD_ALLOW_PRIVATE=true), goes
through the whole flow; bad documents and every SSRF rule are refused on a page."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.app_keys import METADATA_CLIENTS
from service.auth.clients import document_fetch as cimd_fetch
from service.auth.clients import metadata_documents as cimd_module
from service.auth.clients.document_fetch import document_target, judged_addresses
from service.auth.clients.metadata_documents import cache_seconds
from service.auth.clients.outbound_address import public_address
from service.config import Config
from service.errors import FetchRefused
from tests.auth.browser_flow import OAuth
from tests.auth.flow import Account, Registered, authorize_params, bearer, pkce, seed_account
from tests.auth.flow import tool_call as mcp_tool_call

DOC_PATH = "/oauth/client.json"


@dataclass
class DocumentServer:
    """Serves one metadata document (or a misbehaving answer) and counts the fetches."""

    base: str = ""
    fetches: int = 0
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    handler: Callable[[web.Request], Any] | None = None

    @property
    def url(self) -> str:
        return self.base + DOC_PATH

    def document(self, **over: Any) -> dict[str, Any]:
        doc = {
            "client_id": self.url,
            "client_name": "Claude",
            "redirect_uris": ["http://127.0.0.1/callback", "cursor://anysphere.cursor-mcp/cb"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "logo_uri": "https://claude.example/logo.png",
            "unknown_field": {"ignored": True},
        }
        doc.update(over)
        return {k: v for k, v in doc.items() if v is not None}


@pytest.fixture
async def docs() -> AsyncIterator[DocumentServer]:
    state = DocumentServer()

    async def serve(request: web.Request) -> web.StreamResponse:
        state.fetches += 1
        if state.handler is not None:
            answer: web.StreamResponse = await state.handler(request)
            return answer
        return web.json_response(
            state.body if state.body is not None else state.document(), headers=state.headers
        )

    app = web.Application()
    app.router.add_get(DOC_PATH, serve)
    app.router.add_get("/elsewhere.json", serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}"
    yield state
    await runner.cleanup()


@pytest.fixture
async def cimd(aiohttp_client: Any, make_config: Callable[..., Config]) -> OAuth:
    cfg = make_config(OAUTH_CIMD_ALLOW_PRIVATE="true")
    client: TestClient[web.Request, web.Application] = await aiohttp_client(create_app(cfg))
    return OAuth(client, cfg)


async def test_metadata_document_client_completes_the_flow(
    cimd: OAuth, docs: DocumentServer
) -> None:
    account = await seed_account(cimd.pool, workspaces=2)
    # The document names the loopback redirect without a port; the client listens on 61234.
    reg = Registered(docs.url, "http://127.0.0.1:61234/callback")
    await cimd.signin(account)
    _, challenge = pkce()
    page, html = await cimd.approval_page(authorize_params(reg, challenge, cimd.resource))
    assert page.status == 200, html
    assert 'class="client-host"' in html and ">127.0.0.1</strong>" in html
    assert "identified by its metadata document" in html
    assert "Claude" in html

    got = await cimd.code_for(account, reg)
    tokens = await cimd.exchange(got)
    assert tokens.status == 200, await tokens.text()
    issued = await tokens.json()
    body, headers = mcp_tool_call("get_many_workspaces", {"limit": 5})
    mcp = await cimd.http.post("/mcp", json=body, headers=bearer(headers, issued["access_token"]))
    assert mcp.status == 200, await mcp.text()
    refreshed = await cimd.refresh(got, issued["refresh_token"])
    assert refreshed.status == 200, await refreshed.text()

    row = await cimd.pool.fetchrow(
        "SELECT kind, client_name, redirect_uris, token_endpoint_auth_method, metadata::text"
        " FROM oauth_clients WHERE client_id = $1",
        docs.url,
    )
    assert row["kind"] == "metadata" and row["client_name"] == "Claude"
    assert row["token_endpoint_auth_method"] == "none"
    assert "unknown_field" not in row["metadata"] and "logo_uri" in row["metadata"]
    approvals = await cimd.pool.fetchval(
        "SELECT count(*) FROM approvals WHERE client_id = $1", docs.url
    )
    assert approvals == 1
    # Four page loads (GET and POST of /authorize), one fetch: the document was cached.
    assert docs.fetches == 1


async def test_app_scheme_redirect_of_a_document(
    cimd: OAuth, docs: DocumentServer, account: Account
) -> None:
    reg = Registered(docs.url, "cursor://anysphere.cursor-mcp/cb")
    got = await cimd.code_for(account, reg)
    assert (await cimd.exchange(got)).status == 200


async def test_cache_follows_the_caching_headers(cimd: OAuth, docs: DocumentServer) -> None:
    docs.headers = {"Cache-Control": "no-store"}
    reg = Registered(docs.url, "http://127.0.0.1:5000/callback")
    _, challenge = pkce()
    params = authorize_params(reg, challenge, cimd.resource)
    for _ in range(2):
        assert (await cimd.approval_page(params))[0].status == 303
    assert docs.fetches == 2
    # A changed document is seen on the next fetch: its name and redirect URIs follow it.
    docs.body = docs.document(client_name="Claude (new)", redirect_uris=["http://127.0.0.1/new"])
    resp, html = await cimd.approval_page(params)
    assert resp.status == 400 and "does not match the application" in html
    name = await cimd.pool.fetchval(
        "SELECT client_name FROM oauth_clients WHERE client_id = $1", docs.url
    )
    assert name == "Claude (new)"


async def test_token_endpoint_follows_the_document(
    cimd: OAuth, docs: DocumentServer, account: Account, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cimd_module, "REFUSAL_SECONDS", 0.0)  # refusals not remembered here
    docs.headers = {"Cache-Control": "no-store"}
    got = await cimd.code_for(account, Registered(docs.url, "http://127.0.0.1:5001/callback"))
    tokens = await (await cimd.exchange(got)).json()

    async def unavailable(request: web.Request) -> web.Response:
        return web.Response(status=503)

    # The document's host is down: the stored client keeps working (no forced re-approval).
    docs.handler = unavailable
    refreshed = await cimd.refresh(got, tokens["refresh_token"])
    assert refreshed.status == 200, await refreshed.text()
    # The document now names another client: the client is refused where it stands.
    docs.handler = None
    docs.body = docs.document(client_id="https://impostor.example/client.json")
    refused = await cimd.refresh(got, (await refreshed.json())["refresh_token"])
    assert refused.status == 401
    answer = await refused.json()
    assert answer["error"] == "invalid_client"
    assert "client_id is not the URL" in answer["error_description"]


def test_cache_lifetime() -> None:
    assert cache_seconds({"Cache-Control": "public, max-age=60"}, 300) == 60
    assert cache_seconds({"Cache-Control": "max-age=86400"}, 300) == 300  # the ceiling
    assert cache_seconds({}, 300) == 300
    assert cache_seconds({"Cache-Control": "no-cache"}, 300) == 0
    assert cache_seconds({"Cache-Control": "private, no-store"}, 300) == 0


async def test_token_for_a_document_never_authorized_is_invalid_client(
    cimd: OAuth, docs: DocumentServer
) -> None:
    resp = await cimd.token(
        grant_type="authorization_code", client_id=docs.url, code="c", code_verifier="v" * 43
    )
    assert resp.status == 401
    assert (await resp.json())["error"] == "invalid_client"
    assert docs.fetches == 0  # /token never fetches


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"client_id": "https://other.example/client.json"}, "client_id is not the URL"),
        ({"redirect_uris": None}, "malformed"),
        ({"redirect_uris": []}, "1 to 10 redirect URIs"),
        ({"redirect_uris": ["http://evil.example/cb"]}, "not loopback"),
        ({"redirect_uris": ["javascript:alert(1)"]}, "javascript"),
        ({"token_endpoint_auth_method": "client_secret_basic"}, "token_endpoint_auth_method"),
        ({"client_secret": "s3cret"}, "client_secret"),
        ({"grant_types": ["implicit"]}, "grant_types"),
        ({"scope": "admin"}, "unknown scope"),
    ],
)
async def test_bad_documents_are_refused_on_a_page(
    cimd: OAuth, docs: DocumentServer, change: dict[str, Any], words: str
) -> None:
    docs.body = docs.document(**change)
    html = await _refused(cimd, docs.url)
    assert words in html


async def test_document_that_is_not_json(cimd: OAuth, docs: DocumentServer) -> None:
    async def text(request: web.Request) -> web.Response:
        return web.Response(text="<html>hi</html>", content_type="text/html")

    docs.handler = text
    assert "not a JSON object" in await _refused(cimd, docs.url)
    assert docs.fetches == 1
    await _refused(cimd, docs.url)
    assert docs.fetches == 1  # a refusal is remembered briefly: no fetch loop on reloads


async def test_redirects_are_not_followed(cimd: OAuth, docs: DocumentServer) -> None:
    async def moved(request: web.Request) -> web.Response:
        if request.path == DOC_PATH:
            raise web.HTTPFound(docs.base + "/elsewhere.json")
        return web.json_response(docs.document())

    docs.handler = moved
    assert "redirects" in await _refused(cimd, docs.url)
    assert docs.fetches == 1


@pytest.mark.parametrize("declared", [True, False])
async def test_oversized_documents(cimd: OAuth, docs: DocumentServer, declared: bool) -> None:
    padding = "x" * 6000

    async def big(request: web.Request) -> web.StreamResponse:
        if declared:
            return web.json_response(docs.document(client_name=padding))
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(10):
            await resp.write(b" " * 1000)
        await resp.write_eof()
        return resp

    docs.handler = big
    assert "larger than 5120 bytes" in await _refused(cimd, docs.url)


async def test_slow_documents_time_out(
    monkeypatch: pytest.MonkeyPatch, aiohttp_client: Any, make_config: Callable[..., Config],
    docs: DocumentServer,
) -> None:  # fmt: skip
    monkeypatch.setattr(cimd_fetch, "FETCH_TIMEOUT_SECONDS", 0.3)
    cfg = make_config(OAUTH_CIMD_ALLOW_PRIVATE="true")
    slow_app = OAuth(await aiohttp_client(create_app(cfg)), cfg)

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(2)
        return web.json_response(docs.document())

    docs.handler = slow
    assert "did not answer within 0.3 s" in await _refused(slow_app, docs.url)


@pytest.mark.parametrize(
    ("client_id", "words"),
    [
        ("http://docs.example/client.json", "must use https"),
        ("https://user:pw@docs.example/client.json", "user information"),
        ("https://docs.example/client.json#frag", "fragment"),
        ("https://docs.example/", "path"),
        ("https://docs.example/a/../client.json", "path"),
        ("https://127.0.0.1/client.json", "private or local address"),
        ("https://10.1.2.3/client.json", "private or local address"),
        ("https://169.254.169.254/latest/meta-data", "private or local address"),
        ("https://[::1]/client.json", "private or local address"),
        ("https://[::ffff:10.0.0.1]/client.json", "private or local address"),
        ("https://224.0.0.1/client.json", "private or local address"),
        # A name that resolves to loopback: refused after DNS resolution, nothing is sent.
        ("https://localhost:9/client.json", "resolves to a private or local address"),
    ],
)
async def test_ssrf_rules(oauth: OAuth, client_id: str, words: str) -> None:
    """The default configuration (no ELOVA_OAUTH_CIMD_ALLOW_PRIVATE)."""
    assert words in await _refused(oauth, client_id)


async def test_allow_private_still_needs_https_off_loopback(cimd: OAuth) -> None:
    assert "must use https" in await _refused(cimd, "http://docs.example/client.json")


async def test_loopback_document_is_refused_without_the_flag(
    oauth: OAuth, docs: DocumentServer
) -> None:
    assert "must use https" in await _refused(oauth, docs.url)
    assert docs.fetches == 0


def test_public_addresses() -> None:
    for address in ("8.8.8.8", "2606:4700::1111", "1.1.1.1"):
        assert public_address(address), address
    private = [
        "127.0.0.1", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "169.254.169.254",
        "0.0.0.0", "224.0.0.251", "255.255.255.255", "::1", "fe80::1", "fc00::1", "ff02::1",
        "::ffff:192.168.0.1", "::", "junk",
    ]  # fmt: skip
    for address in private:
        assert not public_address(address), address


async def test_resolver_refuses_names_with_private_addresses() -> None:
    target = document_target("https://localhost/client.json", allow_private=False)
    with pytest.raises(FetchRefused, match="private or local"):
        await judged_addresses(target, allow_private=False)


async def test_fetch_session_is_closed_with_the_app(cimd: OAuth) -> None:
    clients = cimd.http.app[METADATA_CLIENTS]
    assert clients.allow_private is True
    assert clients.ceiling == 300


async def _refused(oauth: OAuth, client_id: str) -> str:
    reg = Registered(client_id, "http://127.0.0.1:5000/callback")
    _, challenge = pkce()
    resp, html = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert resp.status == 400, html
    assert "could not be verified" in html
    assert "Access-Control-Allow-Origin" not in resp.headers
    return html.replace("&#39;", "'").replace("&#34;", '"').replace("&quot;", '"')
