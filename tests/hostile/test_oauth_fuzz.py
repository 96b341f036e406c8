"""Fuzzing the unauthenticated OAuth endpoints anyone can reach: dynamic client registration
(JSON), the token and revocation endpoints (forms). Every answer is an RFC 6749/7591 error
object or a success — never a 5xx — and the server stays healthy afterwards.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile.conftest import FUZZ, Hostile
from tests.hostile.strategies import Pairs, any_json, deep, hostile_value, odd_text, render

# A failing example of a 30 KiB body is reported either way; its long repr must not turn
# into a second, confusing warning-as-error.
pytestmark = pytest.mark.filterwarnings("ignore:Generating overly large repr")


REGISTRATION_FIELDS = ["redirect_uris", "client_name", "grant_types", "response_types", "scope",
                       "token_endpoint_auth_method", "application_type", "client_uri"]  # fmt: skip
FORM_FIELDS = ["grant_type", "client_id", "refresh_token", "code", "code_verifier",
               "redirect_uri", "resource", "scope", "token", "token_type_hint"]  # fmt: skip


async def post(h: Hostile, path: str, body: bytes, content_type: str) -> dict[str, Any]:
    async with h.client.post(path, data=body, headers={"Content-Type": content_type}) as resp:
        text = await resp.text()
        assert resp.status < 500, (path, resp.status, text[:300])
    document: dict[str, Any] = json.loads(text)
    if resp.status >= 400:
        assert isinstance(document.get("error"), str), text[:300]
        assert "Traceback" not in text
    return document


registration_bodies = st.one_of(
    st.lists(
        st.tuples(st.sampled_from(REGISTRATION_FIELDS) | odd_text, hostile_value), max_size=5
    ).map(lambda members: render(Pairs(tuple(members)))),
    st.one_of(any_json, deep).map(render),
).map(lambda text: text.encode("utf-8", "surrogatepass"))


@given(body=registration_bodies)
@FUZZ
async def test_registration_never_fails_with_a_5xx(hostile: Hostile, body: bytes) -> None:
    if len(body) <= 32 * 1024:
        await post(hostile, "/register", body, "application/json")


form_bodies = st.builds(
    lambda pairs, raw: "&".join(f"{quote(k)}={quote(v)}" for k, v in pairs).encode() + raw,
    st.lists(
        st.tuples(
            st.sampled_from(FORM_FIELDS) | st.text(max_size=10),
            st.sampled_from(["refresh_token", "authorization_code", "client_credentials"])
            | st.text(max_size=50),
        ),
        max_size=6,
    ),
    st.binary(max_size=64),
)


@given(path=st.sampled_from(["/token", "/revoke"]), body=form_bodies)
@FUZZ
async def test_token_and_revocation_forms_never_fail_with_a_5xx(
    hostile: Hostile, path: str, body: bytes
) -> None:
    await post(hostile, path, body, "application/x-www-form-urlencoded")


async def test_deeply_nested_registration_is_a_400(hostile: Hostile) -> None:
    for body in (
        b'{"x":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"client_name":"a","x":' + b'{"a":' * 3000 + b"1" + b"}" * 3000 + b"}",
    ):
        document = await post(hostile, "/register", body, "application/json")
        assert document["error"] == "invalid_client_metadata"
    async with hostile.client.get("/livez") as live:
        assert live.status == 200


async def test_forms_that_are_not_utf8_are_refused_not_crashed(hostile: Hostile) -> None:
    """Every form endpoint, JSON (token, revocation) and HTML (sign-in, approval, approvals
    page, sign-out), answers a body of invalid UTF-8 with a 4xx."""
    for path in ("/token", "/revoke", "/signin", "/authorize", "/approvals/revoke", "/signout"):
        body = b"email=%ce&client_id=\xce\xff&csrf=x"
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
        async with hostile.client.post(path, data=body, headers=headers) as resp:
            text = await resp.text()
            assert 400 <= resp.status < 500, (path, resp.status, text[:200])
            assert "Traceback" not in text
