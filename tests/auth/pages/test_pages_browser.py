"""The pages people use, in a real headless browser at phone and desktop widths: sign-in,
the approval page (select all, an error next to the list, no sideways scrolling), the
approvals page with a client's activity after its tool calls, revoking after a
confirmation, the sign-out page and a 404 page. Every page is checked for horizontal
overflow, WCAG AA contrast of text and control borders, labels and a visible keyboard focus,
and photographed under the test's tmp_path (look at them: tests/auth/pages/page_checks.py only
measures what can be measured).

Skipped when chromium is not installed, except under CI (the environment variable CI set),
where a missing browser is a failure.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from service.app_keys import DB_POOL
from tests.auth.flow import PASSWORD, bearer, pkce, seed_account, tool_call
from tests.auth.pages.page_checks import (
    contrast_problems,
    focus_walk,
    label_problems,
    overflow_problems,
)
from tests.auth.pages.test_browser import Callback, callback  # noqa: F401 - the fixture
from tests.auth.pages.webdriver import SHIFT_TAB, Browser, browser_available
from tests.support.server import InProcessServer
from tests.support.services import TestDatabase

if not browser_available():
    if os.environ.get("CI"):
        pytest.fail("chromium and chromium-driver are required under CI", pytrace=False)
    pytest.skip("chromium / chromium-driver not installed", allow_module_level=True)

PHONE, PHONE_HEIGHT = 390, 844
NARROW_PHONES = (320, 414)
DESKTOP, DESKTOP_HEIGHT = 1280, 900
LONG_NAMES = [
    "Customer success operations and onboarding automation (EMEA, night shift)",
    "Alpha-Ops-Zürich-" + "x" * 60,
    "Billing",
]


async def check_page(browser: Browser, shots: Path, name: str, *, tabs: int = 0) -> None:
    """At phone and desktop widths: no sideways scrolling, contrast, labels, a screenshot
    of each; with `tabs`, a keyboard walk at the phone width too."""
    for width, height in ((DESKTOP, DESKTOP_HEIGHT), (PHONE, PHONE_HEIGHT)):
        await browser.viewport(width, height)
        assert await overflow_problems(browser, width) == [], f"{name} at {width} px"
        assert await contrast_problems(browser) == [], f"{name} at {width} px"
        await browser.full_screenshot(shots / f"{name}-{width}.png")
    assert await label_problems(browser) == [], name
    if tabs:
        visited, problems = await focus_walk(browser, tabs)
        assert problems == [], name
        assert len(visited) >= min(tabs, 3), visited


async def _checked(browser: Browser) -> int:
    return int(
        await browser.execute(
            "return document.querySelectorAll('input[name=workspace]:checked').length"
        )
    )


async def _text(browser: Browser, css: str) -> str:
    return str(await browser.execute("return document.querySelector(arguments[0]).innerText", css))


@pytest.mark.slow
async def test_pages_at_phone_and_desktop_widths(
    test_database: TestDatabase,
    callback: Callback,  # noqa: F811 - the fixture
    tmp_path: Path,
) -> None:
    shots = tmp_path / "screenshots"
    async with InProcessServer(test_database.dsn) as server, aiohttp.ClientSession() as http:
        pool = server.apps[0][DB_POOL]
        account = await seed_account(pool, workspaces=55, names=LONG_NAMES)
        reg_body = {
            "client_name": "Phone Agent",
            "redirect_uris": [callback.url],
            "grant_types": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        }
        async with http.post(server.base_url + "/register", json=reg_body) as resp:
            assert resp.status == 201
            client_id = (await resp.json())["client_id"]
        verifier, challenge = pkce()
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": callback.url,
            "state": "phone-1",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "scope": "workspaces:read n8n:read",
            "resource": server.mcp_url,
        }
        authorize_url = str(URL(server.base_url + "/authorize").with_query(params))

        async with Browser() as browser:
            # A refused authorization request is a page too.
            await browser.viewport(PHONE, PHONE_HEIGHT)
            await browser.get(server.base_url + "/authorize?client_id=nobody")
            assert await browser.execute("return document.querySelector('h1').innerText")
            await check_page(browser, shots, "authorize-error", tabs=1)

            # Sign-in.
            await browser.get(authorize_url)
            assert "/signin" in await browser.url()
            await check_page(browser, shots, "signin", tabs=3)
            await browser.type("input[name=email]", account.email)
            await browser.type("input[name=password]", PASSWORD)
            await browser.click("button[type=submit]")
            await browser.wait_for_url(server.base_url + "/authorize")

            # The approval page: folded on phones, inside its card at every width.
            await check_page(browser, shots, "approval", tabs=8)
            # The rest of the form by keyboard: permissions, expiry, the link, Deny, Approve.
            visited, problems = await focus_walk(browser, 5, start="input[name=grant_scope]")
            assert problems == [] and visited[-1].startswith("button.button.primary"), visited
            await browser.full_screenshot(shots / "approval-focus-390.png")
            await browser.execute("document.querySelector('#expiry a').focus()")
            await browser.press(SHIFT_TAB)  # back into the radio group, onto the ticked radio
            assert await browser.execute("return document.activeElement.value") == "7d"
            await browser.full_screenshot(shots / "approval-focus-expiry-390.png")
            for width in NARROW_PHONES:
                await browser.viewport(width, PHONE_HEIGHT)
                assert await overflow_problems(browser, width) == [], f"approval at {width} px"
                await browser.full_screenshot(shots / f"approval-{width}.png")
            await browser.viewport(PHONE, PHONE_HEIGHT)
            tz_header = "return getComputedStyle(document.querySelector('th.tz')).display"
            assert await browser.execute(tz_header) == "none"
            assert "Europe/Berlin" in await _text(browser, "td.name")  # folded under the name

            # Nothing chosen: the refusal sits next to the list, not at the top.
            await browser.click_to_load("#select-none")
            assert await _checked(browser) == 0
            await browser.click_to_load("button[name=decision][value=approve]")
            error = await browser.execute(
                """const e = document.querySelector('.field-error');
                   if (!e) return null;
                   const list = document.querySelector('#workspaces .ws-list');
                   return {text: e.innerText, inList: !!e.closest('#workspaces'),
                           gap: list.getBoundingClientRect().top - e.getBoundingClientRect().bottom,
                           top: document.querySelectorAll('.alert-error').length};"""
            )
            assert error is not None and error["text"] == "Choose at least one workspace."
            assert error["inList"] and 0 <= error["gap"] < 150 and error["top"] == 0
            await check_page(browser, shots, "approval-error")

            # Select all: the 50 allowed of 55, and the page says so.
            await browser.click_to_load("#select-all")
            assert await _checked(browser) == 50
            page = await browser.source()
            assert "50 workspaces chosen, the most an approval can include" in page
            assert "you are a member of 55" in page
            await check_page(browser, shots, "approval-select-all")
            await browser.click("input[name=expires][value='1d']")
            await browser.click("button[name=decision][value=approve]")
            answer = await asyncio.wait_for(callback.received.get(), timeout=15)

            # The client uses its approval: two calls of one tool.
            token_form = {
                "grant_type": "authorization_code",
                "code": answer["code"],
                "client_id": client_id,
                "redirect_uri": callback.url,
                "code_verifier": verifier,
                "resource": server.mcp_url,
            }
            async with http.post(server.base_url + "/token", data=token_form) as resp:
                assert resp.status == 200, await resp.text()
                access = (await resp.json())["access_token"]
            body, headers = tool_call("get_many_workspaces", {"limit": 5})
            for _ in range(2):
                async with http.post(
                    server.mcp_url, json=body, headers=bearer(headers, access)
                ) as resp:
                    assert resp.status == 200, await resp.text()

            # /approvals: who, what, when, and the calls per tool.
            await browser.get(server.base_url + "/approvals")
            html = await browser.source()
            assert "Phone Agent" in html and "Dynamic client registration" in html
            assert "127.0.0.1:" in html and LONG_NAMES[0] in html
            assert "Not used yet" not in html
            row = await browser.execute(
                """const r = document.querySelector('table.activity tbody tr');
                   return r ? Array.from(r.cells).map(c => c.innerText.trim()) : null;"""
            )
            assert row == ["get_many_workspaces", "2", "2"]
            wrapped = await browser.execute(
                "return Array.from(document.querySelectorAll('time.date')).filter(t =>"
                " t.getClientRects().length !== 1 || t.getBoundingClientRect().height >"
                " parseFloat(getComputedStyle(t).lineHeight) * 1.5).map(t => t.innerText)"
            )
            assert wrapped == []
            await check_page(browser, shots, "approvals", tabs=4)

            # Revoking asks first; the approval keeps working until confirmed.
            await browser.click_to_load("a.button.danger")
            await browser.wait_for_url(server.base_url + "/approvals/revoke?approval=")
            assert "Revoke" in await browser.title()
            async with http.post(server.mcp_url, json=body, headers=bearer(headers, access)) as r:
                assert r.status == 200
            await check_page(browser, shots, "revoke-confirm", tabs=4)
            await browser.click_to_load("button.danger-solid")
            await browser.wait_for_url(server.base_url + "/approvals?revoked=1")
            assert "was revoked" in await browser.source()
            async with http.post(server.mcp_url, json=body, headers=bearer(headers, access)) as r:
                assert r.status == 401

            # Sign-out page and a 404 page, styled like the rest.
            await browser.get(server.base_url + "/signout")
            button = "return !!document.querySelector('form button[type=submit]')"
            assert await browser.execute(button)
            await check_page(browser, shots, "signout", tabs=3)
            await browser.get(server.base_url + "/no-such-page")
            assert await browser.title() == "Page not found · Elova"
            await check_page(browser, shots, "not-found", tabs=2)
            # The checks see what they are about: a pale border, a pale text, a wide block.
            await browser.execute(
                "document.querySelector('a.button').style.borderColor = '#dfe4ea';"
                "document.querySelector('h1').style.color = '#aab2bd';"
                "document.querySelector('.lead').style.width = '2000px';"
            )
            assert len(await contrast_problems(browser)) == 2
            assert await overflow_problems(browser, PHONE) != []
            await browser.get(server.base_url + "/signout")
            await browser.click("form button[type=submit]")
            await browser.wait_for_url(server.base_url + "/signin")
    assert len(list(shots.glob("*.png"))) == 22
    _report(shots)


def _report(shots: Path) -> None:
    # Where to look (pytest -s shows it); the files stay under the test's tmp_path.
    print(f"screenshots: {shots}")
