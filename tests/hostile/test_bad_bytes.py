"""Bad bytes are bad input (issue 21): a NUL, an unpaired surrogate or invalid UTF-8 in a
query string, a form or a JSON body, on every route, is a 400 in that route's own error
shape, logged at info — never a 500 and never an error line. Names as well as values, first
and later positions. Before, a NUL reached PostgreSQL and became an unhandled 500.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from hypothesis import given
from hypothesis import strategies as st
from yarl import URL

from service.app import create_app
from service.app_keys import DB_POOL
from service.config import Config
from service.edge.text_rule import nul_path
from service.observability.logs import Redaction
from service.store.failures import NOT_TEXT, tool_failure
from tests.hostile.conftest import FUZZ, GENEROUS_LIMITS, ClientFactory, Hostile
from tests.hostile.wire import modern_body, modern_headers

FORM = "application/x-www-form-urlencoded"
BROWSER = {"Accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"}

# Percent-escapes a client can send in a query or a form: NUL, a byte that starts no UTF-8
# sequence, a truncated sequence, and the UTF-8 form of the lone surrogate U+D800.
BAD_ESCAPES = ["%00", "%FF", "%C3", "%ED%A0%80"]
OAUTH_JSON_FORMS = ["/token", "/revoke"]
PAGE_FORMS = ["/signin", "/signout", "/authorize", "/approvals/revoke"]
GET_ROUTES = [
    "/authorize", "/signin", "/signout", "/approvals", "/approvals/revoke",
    "/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-protected-resource/mcp", "/.well-known/jwks.json", "/livez", "/readyz",
]  # fmt: skip


def forms_with_bad_bytes() -> list[str]:
    """Each bad escape in a value and in a name, first and later in the form."""
    return [form for escape in BAD_ESCAPES for form in _forms_with(escape)]


def _forms_with(escape: str) -> list[str]:
    return [
        f"grant_type={escape}",
        f"grant_type=refresh_token&refresh_token=abc{escape}def",
        f"{escape}=1&client_id=x",
        f"client_id=x&ab{escape}cd=1",
        f"email=a%40b.example&password=pw{escape}&next=%2Fapprovals",
    ]


Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(aiohttp_client: ClientFactory, make_config: Callable[..., Config]) -> Client:
    """The real app on a loopback port, without the hostile world (no approvals needed)."""
    return await aiohttp_client(create_app(make_config(**GENEROUS_LIMITS)))


@pytest.fixture
def errors_logged(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO)
    return caplog


def assert_quiet(caplog: pytest.LogCaptureFixture) -> None:
    loud = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not loud, [r.getMessage() for r in loud]
    refusals = [r for r in caplog.records if getattr(r, "event", None) == "bad_input"]
    assert refusals and all(r.levelno == logging.INFO for r in refusals)
    caplog.clear()


async def oauth_error(resp: Any, error: str = "invalid_request") -> dict[str, Any]:
    assert resp.status == 400, await resp.text()
    assert resp.content_type == "application/json"
    document: dict[str, Any] = await resp.json()
    assert document["error"] == error, document
    assert "NUL" in document["error_description"]
    return document


async def error_page(resp: Any) -> None:
    text = await resp.text()
    assert resp.status == 400, text[:300]
    assert resp.content_type == "text/html"
    assert "The request could not be read" in text
    assert "Traceback" not in text


@pytest.mark.parametrize("path", OAUTH_JSON_FORMS)
async def test_oauth_forms_answer_invalid_request(
    client: Client, errors_logged: pytest.LogCaptureFixture, path: str
) -> None:
    for form in forms_with_bad_bytes():
        body = form.encode()
        resp = await client.post(path, data=body, headers={"Content-Type": FORM})
        await oauth_error(resp)
        assert resp.headers["Access-Control-Allow-Origin"] == "*"  # a browser client reads it
        assert resp.headers["Cache-Control"] == "no-store"
        assert_quiet(errors_logged)


@pytest.mark.parametrize("path", PAGE_FORMS)
async def test_page_forms_answer_the_error_page(
    client: Client, errors_logged: pytest.LogCaptureFixture, path: str
) -> None:
    for form in forms_with_bad_bytes():
        headers = {"Content-Type": FORM, **BROWSER}
        resp = await client.post(path, data=form.encode(), headers=headers)
        await error_page(resp)
        assert_quiet(errors_logged)
    # an API client posting to a page gets the JSON shape of the other refusals
    resp = await client.post(path, data=b"email=%00", headers={"Content-Type": FORM})
    await oauth_error(resp)


async def test_a_raw_byte_that_is_not_utf8_in_a_form(
    client: Client, errors_logged: pytest.LogCaptureFixture
) -> None:
    for path in OAUTH_JSON_FORMS:
        resp = await client.post(path, data=b"grant_type=\xff\xfe", headers={"Content-Type": FORM})
        assert resp.status == 400 and (await resp.json())["error"] == "invalid_request"
    resp = await client.post(
        "/signin", data=b"email=\xed\xa0\x80", headers={"Content-Type": FORM, **BROWSER}
    )
    await error_page(resp)
    assert not [r for r in errors_logged.records if r.levelno >= logging.ERROR]


async def test_multipart_forms_with_a_nul_are_refused(
    client: Client, errors_logged: pytest.LogCaptureFixture
) -> None:
    boundary = "xyz"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="email"\r\n\r\n'
        f"a\x00b\r\n--{boundary}--\r\n"
    ).encode()
    headers = {"Content-Type": f"multipart/form-data; boundary={boundary}", **BROWSER}
    await error_page(await client.post("/signin", data=body, headers=headers))
    assert_quiet(errors_logged)


@pytest.mark.parametrize("path", GET_ROUTES)
async def test_queries_on_every_page_and_document(
    client: Client, errors_logged: pytest.LogCaptureFixture, path: str
) -> None:
    for query in (
        q
        for escape in BAD_ESCAPES
        for q in (f"next={escape}", f"{escape}=1", f"client_id=x&response_type=code{escape}")
    ):
        url = URL(f"{path}?{query}", encoded=True)
        await error_page(await client.get(url, headers=BROWSER))
        await oauth_error(await client.get(url))
        assert_quiet(errors_logged)


@pytest.mark.parametrize("path", ["/token", "/revoke", "/register"])
async def test_queries_on_the_oauth_json_endpoints(
    client: Client, errors_logged: pytest.LogCaptureFixture, path: str
) -> None:
    url = URL(f"{path}?x=%00", encoded=True)
    resp = await client.post(url, data=b"grant_type=x", headers={"Content-Type": FORM})
    await oauth_error(resp, "invalid_client_metadata" if path == "/register" else "invalid_request")
    assert_quiet(errors_logged)


def registrations() -> list[bytes]:
    good = {"redirect_uris": ["http://127.0.0.1:9/cb"], "client_name": "Agent"}
    out = [
        json.dumps({**good, "client_name": "Age\x00nt"}).encode(),
        json.dumps({**good, "redirect_uris": ["http://127.0.0.1:9/\x00"]}).encode(),
        json.dumps({**good, "x\x00": 1}).encode(),
        json.dumps({"\x00": {"deeper": ["\x00"]}, **good}).encode(),
    ]
    assert all(b"\\u0000" in body for body in out)
    return out


async def test_registration_json_with_a_nul_is_invalid_client_metadata(
    client: Client, errors_logged: pytest.LogCaptureFixture
) -> None:
    for body in registrations():
        resp = await client.post(
            "/register", data=body, headers={"Content-Type": "application/json"}
        )
        await oauth_error(resp, "invalid_client_metadata")
        assert_quiet(errors_logged)
    # an escaped backslash before u0000 is the text "\u0000", not a NUL: accepted
    resp = await client.post(
        "/register",
        data=b'{"redirect_uris": ["http://127.0.0.1:9/cb"], "client_name": "a\\\\u0000"}',
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 201, await resp.text()
    assert (await resp.json())["client_name"] == "a\\u0000"


@pytest.mark.parametrize(
    "body", [b'{"client_name": "\\ud800"}', b'{"\\udfff": 1}', b'"\xed\xa0\x80"']
)
async def test_registration_json_with_a_lone_surrogate_is_a_400(
    client: Client, errors_logged: pytest.LogCaptureFixture, body: bytes
) -> None:
    resp = await client.post("/register", data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 400
    assert (await resp.json())["error"] == "invalid_client_metadata"
    assert not [r for r in errors_logged.records if r.levelno >= logging.ERROR]


def nul_arguments(workspace: str) -> list[tuple[str, dict[str, Any], str]]:
    """(tool, arguments, what the VALIDATION_ERROR says): the argument's own rule where it
    has one, else that it holds a NUL."""
    return [
        ("get_workspace", {"workspaceId": workspace + "\x00"}, "`workspaceId`"),
        ("get_many_workflows", {"workspaceId": workspace, "cursor": "a\x00"},
         "`cursor` must not contain NUL"),
        ("get_many_executions", {"workspaceId": workspace, "timeZone": "UTC\x00"}, "timeZone"),
        ("get_many_executions", {"workspaceId": workspace, "status": "error\x00"}, "`status`"),
        ("get_many_workflows", {"workspaceId\x00": workspace}, "Unknown argument"),
    ]  # fmt: skip


async def test_mcp_tool_arguments_with_a_nul_are_validation_errors(
    hostile: Hostile, errors_logged: pytest.LogCaptureFixture
) -> None:
    granted = hostile.world.approvals["a"]
    workspace = str(granted.workspaces[0])
    for tool, arguments, said in nul_arguments(workspace):
        reply = await hostile.mcp.call(granted.token, tool, arguments)
        assert reply.status == 200 and reply.is_tool_error, reply.body[:300]
        assert reply.error_code == "VALIDATION_ERROR", reply.body[:300]
        assert said in reply.json["result"]["content"][0]["text"], reply.body[:300]
    assert not [r for r in errors_logged.records if r.levelno >= logging.WARNING]


def test_the_nul_is_found_where_it_is() -> None:
    assert nul_path({"a": ["x", {"b\x00": 1}]}) == "a[1].b\x00"
    assert nul_path({"a": {"b": ["ok", "n\x00"]}}) == "a.b[1]"
    assert nul_path({"a": "fine", "n": 3}) is None


async def test_mcp_envelopes_with_a_nul_are_invalid_requests(
    hostile: Hostile, errors_logged: pytest.LogCaptureFixture
) -> None:
    granted = hostile.world.approvals["a"]
    workspace = str(granted.workspaces[0])
    arguments = {"workspaceId": workspace}
    bodies = [
        modern_body("tools/call", {"name": "get_workspace\x00", "arguments": arguments}),
        modern_body("tools/call", {"name": "get_workspace", "arguments": arguments}, "id\x00"),
        modern_body("tools/list", {"cursor": "\x00"}),
        modern_body("tools/call", {"name": "get\x00", "arguments": {"workspaceId": "\x00"}}),
    ]
    for body in bodies:
        assert b"\\u0000" in body
        reply = await hostile.mcp.post(body, modern_headers(granted.token, "tools/call"))
        assert reply.status == 400, reply.body[:300]
        error = reply.json["error"]
        assert error["code"] == -32600 and "NUL" in error["message"], error
    assert not [r for r in errors_logged.records if r.levelno >= logging.ERROR]


async def test_mcp_lone_surrogates_and_bad_queries(
    hostile: Hostile, errors_logged: pytest.LogCaptureFixture
) -> None:
    granted = hostile.world.approvals["a"]
    headers = modern_headers(granted.token, "tools/call")
    body = modern_body("tools/call", {"name": "get_workspace"}).replace(
        b'"get_workspace"', b'"get_\\ud800workspace"'
    )
    reply = await hostile.mcp.post(body, headers)
    assert reply.status == 400 and reply.json["error"]["code"] == -32700
    reply = await hostile.mcp.post(
        modern_body("tools/list"), modern_headers(granted.token, "tools/list"),
        url=str(URL("/mcp?x=%00", encoded=True)),
    )  # fmt: skip
    assert reply.status == 400 and reply.json["error"]["code"] == -32600
    assert_quiet(errors_logged)


async def test_text_postgresql_refuses_is_a_400_not_a_500(
    make_config: Callable[..., Config],
    aiohttp_client: ClientFactory,
    errors_logged: pytest.LogCaptureFixture,
) -> None:
    """Defence in depth: NUL text that reaches a statement anyway (a route that reads its
    input some other way) is answered like the rest, not as a 500; in a tool, the same
    refusal of PostgreSQL is a VALIDATION_ERROR."""
    refused: list[BaseException] = []

    async def probe(request: web.Request) -> web.Response:
        try:
            await request.app[DB_POOL].fetchval("SELECT $1::text", "a\x00b")
        except NOT_TEXT as err:
            refused.append(err)
            raise
        return web.Response(text="stored")

    app = create_app(make_config())
    app.router.add_post("/probe", probe)
    client = await aiohttp_client(app)
    resp = await client.post("/probe", headers={"Content-Type": "text/plain"}, data=b"x")
    await oauth_error(resp)
    await error_page(await client.post("/probe", headers=BROWSER))
    assert_quiet(errors_logged)
    translated = tool_failure(refused[0], 5.0)
    assert translated is not None and translated.code == "VALIDATION_ERROR"


COOKIES = [
    b"elova_session=\xff\xfe; elova_signin=x",  # not UTF-8: surrogates in the header
    b"elova_session=\xed\xa0\x80",  # the UTF-8 form of a lone surrogate
    b'elova_signin="\\000x"',  # a quoted value whose octal escape is a NUL
    b'theirs="a\\000"; elova_session=abc',  # any cookie, not only ours
]


COOKIE_PAGES = [("GET", "/signin"), ("POST", "/signin"), ("GET", "/approvals"),
                ("GET", "/signout"), ("POST", "/signout"), ("POST", "/authorize")]  # fmt: skip


async def _raw(client: Client, method: str, path: str, cookie: bytes) -> tuple[int, bytes]:
    """A request whose Cookie header carries raw bytes (clients would encode them)."""
    server = client.server
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = b"csrf=x&email=a%40b.example&password=pw"
    writer.write(
        f"{method} {path} HTTP/1.1\r\nHost: x\r\nAccept: text/html\r\nConnection: close\r\n"
        f"Content-Type: {FORM}\r\nContent-Length: {len(body)}\r\n".encode()
        + b"Cookie: " + cookie + b"\r\n\r\n" + body
    )  # fmt: skip
    await writer.drain()
    answer = await reader.read()
    writer.close()
    head, _, page = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), page


@pytest.mark.parametrize("cookie", COOKIES)
async def test_cookies_that_are_not_text_are_refused_on_every_page(
    client: Client, errors_logged: pytest.LogCaptureFixture, cookie: bytes
) -> None:
    for method, path in COOKIE_PAGES:
        status, page = await _raw(client, method, path, cookie)
        assert status == 400, (method, path, status, page[:200])
        assert b"The request could not be read" in page
        assert_quiet(errors_logged)


@pytest.mark.parametrize("raw", [b"next=\xff", b"\xed\xa0\x80=1", b"client_id=x&state=\xc3"])
async def test_raw_bytes_in_a_query_that_are_not_utf8(
    client: Client, errors_logged: pytest.LogCaptureFixture, raw: bytes
) -> None:
    """aiohttp's parser refuses such a request line itself (400, before the app); with the
    logging the service configures (`Redaction` on aiohttp's loggers) that is an info line."""
    server_log = logging.getLogger("aiohttp.server")
    server_log.addFilter(redaction := Redaction())
    try:
        for path in ("/signin", "/authorize", "/approvals", "/.well-known/jwks.json"):
            reader, writer = await asyncio.open_connection("127.0.0.1", client.server.port)
            writer.write(
                b"GET " + path.encode() + b"?" + raw + b" HTTP/1.1\r\nHost: x\r\n"
                b"Accept: text/html\r\nConnection: close\r\n\r\n"
            )
            answer = await reader.read()
            writer.close()
            assert answer.split(b" ", 2)[1] == b"400", (path, answer[:200])
        assert not [r for r in errors_logged.records if r.levelno >= logging.ERROR]
    finally:
        server_log.removeFilter(redaction)


FORM_ROUTES = [*OAUTH_JSON_FORMS, *PAGE_FORMS]
FORM_NAMES = ["grant_type", "client_id", "refresh_token", "code", "email", "password", "csrf",
              "next", "workspace", "decision"]  # fmt: skip


def _spliced(pairs: list[tuple[str, str]], where: int, bad: str) -> str:
    """The urlencoded pairs with `bad` between two characters of one name or value."""
    fields = [[quote(ch, safe="") for ch in text] for pair in pairs for text in pair]
    field = fields[where % len(fields)]
    field.insert((where // len(fields)) % (len(field) + 1), bad)
    encoded = ["".join(f) for f in fields]
    return "&".join(f"{encoded[i]}={encoded[i + 1]}" for i in range(0, len(encoded), 2))


@given(
    path=st.sampled_from(FORM_ROUTES),
    pairs=st.lists(
        st.tuples(st.sampled_from(FORM_NAMES) | st.text(max_size=8), st.text(max_size=20)),
        min_size=1,
        max_size=5,
    ),
    where=st.integers(min_value=0, max_value=10_000),
    bad=st.sampled_from([*BAD_ESCAPES, "%00%00", "%F0%9F", "%80", "%ED%BF%BF"]),
    in_query=st.booleans(),
    browser=st.booleans(),
)
@FUZZ
async def test_bad_bytes_anywhere_are_a_400_never_a_500(
    client: Client,
    errors_logged: pytest.LogCaptureFixture,
    path: str,
    pairs: list[tuple[str, str]],
    where: int,
    bad: str,
    in_query: bool,
    browser: bool,
) -> None:
    """The general rule beyond the named cases: one bad escape spliced into any name or
    value of any form (or of the query), on every form route."""
    plain = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)
    spliced = _spliced(pairs, where, bad)
    headers = {"Content-Type": FORM, **(BROWSER if browser else {})}
    url = URL(f"{path}?{spliced}" if in_query else path, encoded=True)
    body = (plain if in_query else spliced).encode()
    resp = await client.post(url, data=body, headers=headers)
    assert resp.status == 400, (path, spliced, await resp.text())
    if browser and path in PAGE_FORMS:
        await error_page(resp)
    else:
        await oauth_error(resp)
    assert not [r for r in errors_logged.records if r.levelno >= logging.ERROR]
    errors_logged.clear()
