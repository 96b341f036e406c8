"""The pages over plain HTTP: error pages for browsers and JSON for the rest, the sign-out
page, select all and clear without a script, refusals next to their choice, what the
approvals page says about each client, and the revocation confirmation."""

from __future__ import annotations

import re
import uuid

from aiohttp import web
from aiohttp.test_utils import TestClient

from service.auth.approvals import create_operator_client, grant_approval
from service.auth.pages.rendering import setup_pages
from service.server.error_answers import answer_errors
from tests.auth.browser_flow import OAuth
from tests.auth.flow import BROWSER, Account, authorize_params, forms, pkce, seed_account
from tests.auth.helpers import ClientFactory

HTML = BROWSER
API = {"Accept": "application/json"}


async def test_unknown_paths_are_a_page_for_browsers_and_json_for_the_rest(oauth: OAuth) -> None:
    page = await oauth.http.get("/no-such-page", headers=HTML)
    assert page.status == 404 and page.content_type == "text/html"
    html = await page.text()
    assert "Page not found" in html and 'href="/oauth/elova.css"' in html
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]
    for headers in (API, {"Accept": "*/*"}, {"Accept": "text/html;q=0"}):
        resp = await oauth.http.get("/no-such-page", headers=headers)
        assert resp.status == 404 and resp.content_type == "application/json"
        assert (await resp.json())["error"] == "not_found"


async def test_wrong_methods_keep_allow_and_api_answers_stay_json(oauth: OAuth) -> None:
    page = await oauth.http.post("/approvals", headers=HTML)
    assert page.status == 405 and page.content_type == "text/html"
    assert "GET" in page.headers["Allow"]
    resp = await oauth.http.get("/token", headers=API)
    assert resp.status == 405 and (await resp.json())["error"] == "method_not_allowed"
    assert "POST" in resp.headers["Allow"]
    # /mcp answers its own 405 (JSON-RPC), for a browser too, but for a browser's GET, which
    # gets the page of tests/mcp/test_browser_page.py (issue 54); OAuth JSON errors unchanged.
    mcp = await oauth.http.put("/mcp", headers=HTML)
    assert mcp.status == 405 and mcp.content_type == "application/json"
    assert (await mcp.json())["error"]["message"] == "Method Not Allowed"
    token = await oauth.http.post("/token", data={"grant_type": "nope"}, headers=HTML)
    assert token.status == 400 and token.content_type == "application/json"
    assert "error" in await token.json()


async def test_an_unexpected_failure_is_a_page_for_browsers(
    aiohttp_client: ClientFactory,
) -> None:
    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("a bug")

    app = web.Application()
    setup_pages(app)
    app.middlewares.append(answer_errors)
    app.router.add_get("/broken", broken)
    client: TestClient[web.Request, web.Application] = await aiohttp_client(app)
    page = await client.get("/broken", headers=HTML)
    assert page.status == 500 and page.content_type == "text/html"
    html = await page.text()
    assert "Something went wrong" in html and "a bug" not in html
    resp = await client.get("/broken", headers=API)  # left to the request-log middleware
    assert resp.status == 500 and resp.content_type != "text/html"


async def test_signout_page_has_a_button_that_posts(oauth: OAuth, account: Account) -> None:
    anonymous = await oauth.http.get("/signout")
    assert anonymous.status == 200 and "You are signed out" in await anonymous.text()
    await oauth.signin(account)
    page = await oauth.http.get("/signout")
    html = await page.text()
    assert page.status == 200 and account.email in html
    form = next(f for f in forms(html) if f["action"] == "/signout")
    done = await oauth.http.post("/signout", data=dict(form["fields"]), allow_redirects=False)
    assert done.status == 303
    assert (await oauth.http.get("/approvals", allow_redirects=False)).status == 303


async def _approval_page(oauth: OAuth, account: Account) -> dict[str, str]:
    reg = await oauth.register()
    _, challenge = pkce()
    await oauth.signin(account)
    return authorize_params(reg, challenge, oauth.resource)


def _ticked(html: str) -> list[str]:
    form = next(f for f in forms(html) if f["action"] == "/authorize")
    return [value for name, value, on in form["options"] if name == "workspace" and on]


async def test_select_all_and_clear_work_without_a_script(oauth: OAuth) -> None:
    acc = await seed_account(oauth.pool, workspaces=55)
    params = await _approval_page(oauth, acc)
    _, html = await oauth.approval_page(params)
    assert 'id="select-all"' in html and "<script" not in html
    assert "you are a member of 55" in html
    resp = await oauth.decide(params, workspaces=[acc.workspaces[-1]], decision="select_all")
    assert resp.status == 200
    html = await resp.text()
    ticked = _ticked(html)
    assert len(ticked) == 50 and acc.workspaces[-1] in ticked  # what was ticked stays
    assert "50 workspaces chosen, the most an approval can include" in html
    resp = await oauth.decide(params, workspaces=acc.workspaces[:3], decision="select_none")
    assert resp.status == 200 and _ticked(await resp.text()) == []


async def test_refusals_stand_next_to_their_choice(oauth: OAuth, account: Account) -> None:
    params = await _approval_page(oauth, account)
    resp = await oauth.decide(params, workspaces=[])
    html = await resp.text()
    assert resp.status == 400
    fieldset = re.search(r'<fieldset[^>]*id="workspaces".*?</fieldset>', html, re.S)
    assert fieldset is not None and "Choose at least one workspace." in fieldset[0]
    assert 'aria-describedby="workspaces-error"' in fieldset[0]
    assert "alert-error" not in html  # not repeated at the top
    resp = await oauth.decide(params, workspaces=account.workspaces[:1], scopes=[])
    fieldset = re.search(r'<fieldset[^>]*id="permissions".*?</fieldset>', await resp.text(), re.S)
    assert fieldset is not None and "at least one permission" in fieldset[0]


async def test_approvals_page_says_how_each_client_registered(
    oauth: OAuth, account: Account
) -> None:
    account_id = uuid.UUID(account.id)
    workspace = [uuid.UUID(account.workspaces[0])]
    async with oauth.pool.acquire() as conn:
        operator = await create_operator_client(conn, "Nightly report")
        await conn.execute(
            "INSERT INTO oauth_clients (client_id, client_name, kind, redirect_uris)"
            " VALUES ('https://agent.example/client.json', 'Metadata Agent', 'dynamic',"
            " '{https://agent.example/callback}')"
        )
        for client in (operator, "https://agent.example/client.json"):
            await grant_approval(
                conn, account_id=account_id, client_id=client, workspace_ids=workspace,
                scopes="workspaces:read", expires="7d",
            )  # fmt: skip
    await oauth.register()
    await oauth.signin(account)
    html = await (await oauth.http.get("/approvals")).text()
    assert "Created by the operator (elova-mcp approve)" in html
    assert "Client ID Metadata Document" in html and "agent.example" in html
    assert html.count("Not used yet") == 2
    assert html.count('class="date"') == 4  # created and expires of each


async def test_revoking_is_confirmed_first(oauth: OAuth, account: Account) -> None:
    await oauth.code_for(account)
    page = await (await oauth.http.get("/approvals")).text()
    link = re.search(r'href="(/approvals/revoke\?approval=([^"]+))"', page)
    assert link is not None
    confirm = await oauth.http.get(link[1])
    html = await confirm.text()
    assert confirm.status == 200 and "Revoke access" in html and "Cancel" in html
    active = "SELECT revoked_at IS NULL FROM approvals WHERE id = $1"
    assert await oauth.pool.fetchval(active, uuid.UUID(link[2]))
    for bad in ("nonsense", str(uuid.uuid4())):
        missing = await oauth.http.get("/approvals/revoke", params={"approval": bad})
        assert missing.status == 404 and "No such approval" in await missing.text()
    victim = await seed_account(oauth.pool, workspaces=1)
    other = await oauth.code_for(victim)
    assert other  # signed in as the victim now; back to the first account
    oauth.http.session.cookie_jar.clear()
    await oauth.signin(account)
    theirs = await oauth.pool.fetchval(
        "SELECT id FROM approvals WHERE account_id = $1", uuid.UUID(victim.id)
    )
    resp = await oauth.http.get("/approvals/revoke", params={"approval": str(theirs)})
    assert resp.status == 404
    oauth.http.session.cookie_jar.clear()
    anonymous = await oauth.http.get(link[1], allow_redirects=False)
    assert anonymous.status == 303 and anonymous.headers["Location"].startswith("/signin")
