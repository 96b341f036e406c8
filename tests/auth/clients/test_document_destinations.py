"""The metadata-document fetch against the running app: `GET /authorize` with client ids that
point at a real listener on this machine, in every spelling of the security review (issue
21) and more, must make the server open ZERO connections to it, and answer the same for an
open and a closed port. And a fetch that passes the rules connects to the address it judged,
with TLS verified against the URL's host name."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import socket
import ssl
import statistics
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.abc import ResolveResult

from service.app import create_app
from service.auth.clients import document_fetch as cimd_fetch
from service.auth.clients.document_fetch import Target, fetch_document, new_session
from service.config import Config
from service.errors import FetchRefused, PrivateAddress
from tests.auth.browser_flow import OAuth
from tests.auth.clients.test_outbound_address import DIGIT_ZEROS, DOTS, spelled, teredo
from tests.auth.flow import Registered, authorize_params, pkce
from tests.support.tls import make_tls

DOC_PATH = "/oauth/client.json"


@dataclass
class Listener:
    """A plain TCP listener on 127.0.0.1 (and ::1 on the same port when it can): counts the
    connections it accepts and closes them."""

    port: int = 0
    accepted: list[str] = field(default_factory=list)
    servers: list[asyncio.Server] = field(default_factory=list)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted.append(str(writer.get_extra_info("peername")))
        writer.close()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    state = Listener()
    v4 = await asyncio.start_server(state._accept, "127.0.0.1", 0)
    state.port = v4.sockets[0].getsockname()[1]
    state.servers.append(v4)
    # No IPv6 loopback, or the port taken there: the IPv4 listener still counts.
    with contextlib.suppress(OSError):
        state.servers.append(await asyncio.start_server(state._accept, "::1", state.port))
    yield state
    for server in state.servers:
        server.close()
        await server.wait_closed()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# Host spellings that name this machine (loopback, "this host", or an IPv6 form carrying
# 127.0.0.1), each followed by ":<port>" in the client id.
LOCAL_HOSTS = [
    *(spelled("127.0.0.1", zero, ".") for zero in DIGIT_ZEROS.values()),
    *(spelled("127.0.0.1", DIGIT_ZEROS["full-width"], dot) for dot in DOTS.values()),
    *(spelled("127.0.0.1", None, dot) for dot in DOTS.values() if dot != "."),
    "０.０.０.０", "𝟎.𝟎.𝟎.𝟎",
    "0177.0.0.1", "0x7f.0.0.1", "0x7f000001", "2130706433", "017700000001", "127.1",
    "127.0.1", "127.0.0.01", "0", "0x0", "127.0.0.1.",
    "%31%32%37.0.0.1", "127.0.0.1%2500", "127.0.0.1\\.docs.example",
    "docs.example\\@127.0.0.1", "user@127.0.0.1",
    "127.0.0.1", "127.0.0.2", "127.255.255.254", "0.0.0.0", "[::1]", "[::]",
    "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]",
    "[::ffff:0:127.0.0.1]", "[64:ff9b::127.0.0.1]", "[64:ff9b:1::7f00:1]", "[2002:7f00:1::1]",
    f"[{teredo('8.8.8.8', '127.0.0.1')}]", f"[{teredo('127.0.0.1', '8.8.8.8')}]",
    "[2001:4860:1::5efe:127.0.0.1]", "[::ffff:0.0.0.0]", "[fe80::1]",
    "localhost", "LOCALHOST", "localhost.", "ｌｏｃａｌｈｏｓｔ", "local\u00adhost",
]  # fmt: skip


async def refusal(oauth: OAuth, client_id: str) -> str:
    """The reason the page gives for refusing the metadata document at `client_id`."""
    reg = Registered(client_id, "http://127.0.0.1:5000/callback")
    _, challenge = pkce()
    resp, page = await oauth.approval_page(authorize_params(reg, challenge, oauth.resource))
    assert resp.status == 400, page
    found = re.search(r"metadata document: (.*?)\. Go back", html.unescape(page), re.S)
    assert found is not None, page
    return found.group(1)


def client_id(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{host}:{port}{DOC_PATH}"


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_no_spelling_of_this_machine_gets_a_connection(
    oauth: OAuth, listener: Listener, scheme: str
) -> None:
    closed = closed_port()
    timings: dict[str, list[float]] = {"open": [], "closed": []}
    for host in LOCAL_HOSTS:
        reasons = {}
        for name, port in (("open", listener.port), ("closed", closed)):
            started = time.perf_counter()
            reasons[name] = await refusal(oauth, client_id(scheme, host, port))
            timings[name].append(time.perf_counter() - started)
        # The answer names neither the port nor what listens there.
        assert reasons["open"] == reasons["closed"], host
        assert str(listener.port) not in reasons["open"], host
    assert listener.accepted == []
    # Nothing behind the address is waited for: every refusal answers at once, the same
    # for an open and a closed port (generous bounds for a loaded machine).
    assert max(timings["open"] + timings["closed"]) < 2.0
    assert abs(statistics.median(timings["open"]) - statistics.median(timings["closed"])) < 0.1


async def test_every_non_public_refusal_reads_the_same(oauth: OAuth, listener: Listener) -> None:
    reasons = {
        await refusal(oauth, client_id("https", host, listener.port))
        for host in ("127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]",
                     "[2002:7f00:1::]", "0.0.0.0", "localhost", "10.0.0.1", "169.254.169.254")
    }  # fmt: skip
    assert reasons == {cimd_fetch.NOT_PUBLIC}
    forms = {
        await refusal(oauth, client_id("https", host, listener.port))
        for host in ("１２７.０.０.１", "127。0。0。1", "0177.0.0.1", "127.1", "localhost.")
    }
    assert forms == {cimd_fetch.BAD_HOST}
    assert listener.accepted == []


@pytest.fixture
async def private_ok(aiohttp_client: Any, make_config: Callable[..., Config]) -> OAuth:
    cfg = make_config(OAUTH_CIMD_ALLOW_PRIVATE="true")
    return OAuth(await aiohttp_client(create_app(cfg)), cfg)


async def test_the_listener_does_count_a_fetch_that_is_allowed(
    private_ok: OAuth, listener: Listener
) -> None:
    """The control: with ELOVA_OAUTH_CIMD_ALLOW_PRIVATE the fetch does reach the listener
    (which closes at once), and the form rule still refuses the Unicode spellings."""
    reason = await refusal(private_ok, client_id("http", "127.0.0.1", listener.port))
    assert reason == "127.0.0.1 could not be reached"
    reached = len(listener.accepted)
    assert reached >= 1  # aiohttp may retry a GET once on a dropped connection
    for host in LOCAL_HOSTS[:20]:
        assert await refusal(private_ok, client_id("http", host, listener.port)) in (
            cimd_fetch.BAD_HOST,
            "the client id URL must not contain user information",
        ), host
    assert len(listener.accepted) == reached


# TLS: the fetch connects to the judged address and verifies the URL's host name.


@dataclass
class TlsDocuments:
    port: int
    client_tls: ssl.SSLContext
    server_names: list[str | None]


@pytest.fixture
async def tls_documents(tmp_path: Path) -> AsyncIterator[TlsDocuments]:
    files = make_tls(tmp_path / "tls")  # a certificate for 127.0.0.1 and localhost
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(files.cert, files.key)
    names: list[str | None] = []

    def server_name(sock: Any, name: str | None, ctx: ssl.SSLContext) -> None:
        names.append(name)

    server_tls.sni_callback = server_name

    async def serve(request: web.Request) -> web.Response:
        return web.json_response({"client_id": str(request.url)})

    app = web.Application()
    app.router.add_get(DOC_PATH, serve)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_tls)
    await site.start()
    client_tls = ssl.create_default_context(cafile=str(files.ca))
    yield TlsDocuments(runner.addresses[0][1], client_tls, names)
    await runner.cleanup()


async def test_tls_is_verified_against_the_url_host(tls_documents: TlsDocuments) -> None:
    session = new_session(allow_private=True, tls=tls_documents.client_tls)
    try:
        url = f"https://localhost:{tls_documents.port}{DOC_PATH}"
        fetched = await fetch_document(session, url, allow_private=True)
        assert b"client_id" in fetched.body
        assert tls_documents.server_names == ["localhost"]
    finally:
        await session.close()


async def test_the_connection_goes_to_the_judged_address_only(
    tls_documents: TlsDocuments, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`docs.test` has no DNS entry: the fetch still reaches 127.0.0.1, the one address it
    judged (nothing is looked up again), and the handshake names docs.test, which the
    certificate does not: refused as unreachable."""

    async def judged(target: Target, *, allow_private: bool) -> tuple[ResolveResult, ...]:
        found: ResolveResult = {
            "hostname": target.host.name, "host": "127.0.0.1", "port": target.port,
            "family": socket.AF_INET, "proto": 0,
            "flags": socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
        }  # fmt: skip
        return (found,)

    monkeypatch.setattr(cimd_fetch, "judged_addresses", judged)
    session = new_session(allow_private=True, tls=tls_documents.client_tls)
    try:
        url = f"https://docs.test:{tls_documents.port}{DOC_PATH}"
        with pytest.raises(FetchRefused, match="docs.test could not be reached") as refused:
            await fetch_document(session, url, allow_private=True)
        assert refused.value.transient
        assert tls_documents.server_names == ["docs.test"]
    finally:
        await session.close()


async def test_a_connection_the_fetch_did_not_judge_is_refused(
    tls_documents: TlsDocuments,
) -> None:
    """Without the fetch's judgement (a session used directly), the resolver refuses."""
    session = new_session(allow_private=True, tls=tls_documents.client_tls)
    try:
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await session.get(f"https://localhost:{tls_documents.port}{DOC_PATH}")
        assert isinstance(refused.value.os_error, PrivateAddress)
        assert tls_documents.server_names == []
    finally:
        await session.close()
