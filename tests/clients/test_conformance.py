"""The MCP conformance suite (@modelcontextprotocol/conformance, pinned in ts/package.json)
against the running `elova-mcp serve`.

- `server --requirements 2026-07-28` and `--requirements 2025-11-25`, through the bearer
  test proxy: every scenario each revision requires (and the extension and pending ones it
  also runs). Every check must be SUCCESS or INFO, except the ones listed in
  `conformance_expected.toml`: scenarios that need the suite's own fixture tools, prompts or
  resources (or an extension we do not implement), each with its reason. The list must
  match exactly: a listed check that passes now fails the test too, so it stays honest.
- `authorization` against our authorization server: the metadata (with
  `client_id_metadata_document_supported`, no warning) and a full authorization code grant
  whose client is a Client ID Metadata Document served by this test; the suite's callback
  listens on a port the document does not name (loopback redirects may change port), the
  request has no `scope`, and the browser steps (sign-in, approval) are done with HTTP.

Results are read from the suite's checks.json files, not only from its exit code.
"""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import asyncpg
import pytest
from aiohttp import web

from tests.auth.flow import forms, hidden, seed_account
from tests.clients.node import BIN, TS_DIR
from tests.clients.proxy import BearerProxy
from tests.support.server import ServeProcesses, free_port
from tests.support.services import TestDatabase

EXPECTED_FILE = Path(__file__).with_name("conformance_expected.toml")
# SKIPPED: the suite found the check not applicable (subscriptions without listChanged).
OK_STATUSES = ("SUCCESS", "INFO", "SKIPPED")
_RUN_DIR = re.compile(r"(?:server|authorization)-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z")


def expected_failures(revision: str) -> dict[str, dict[str, str]]:
    """scenario -> {check id: reason} for one revision."""
    document = tomllib.loads(EXPECTED_FILE.read_text("utf-8"))
    table: dict[str, dict[str, str]] = {}
    for scenario, entry in document[revision].items():
        reason = entry["reason"]
        assert reason.strip(), f"{scenario}: every expected failure needs a reason"
        table[scenario] = {check: reason for check in entry["checks"]}
    return table


def results(output_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """scenario -> its checks, from every checks.json the suite wrote."""
    found: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(output_dir.glob("*/checks.json")):
        match = _RUN_DIR.fullmatch(path.parent.name)
        assert match, path
        found[match[1]] = json.loads(path.read_text("utf-8"))
    return found


def failing(checks: list[dict[str, Any]]) -> set[str]:
    return {c["id"] for c in checks if c["status"] not in OK_STATUSES}


async def _run(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=TS_DIR, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(f"conformance timed out after {timeout} s\n{out.decode()}") from None
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


# The 2026-07-28 run alone takes about 40 s (docs/decisions/tooling.md).
@pytest.mark.timeout(120)
@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
async def test_server_requirements(
    node_env: dict[str, str], proxy: BearerProxy, tmp_path: Path, revision: str
) -> None:
    code, output = await _run(
        [str(BIN / "conformance"), "server", "--url", proxy.url, "--requirements", revision,
         "--output-dir", str(tmp_path)],
        node_env, timeout=300,
    )  # fmt: skip
    ran = results(tmp_path)
    expected = expected_failures(revision)
    assert ran, output
    assert set(expected) <= set(ran), (
        f"listed scenarios that did not run: {set(expected) - set(ran)}"
    )
    surprises = {}
    for scenario, checks in ran.items():
        bad = failing(checks)
        listed = set(expected.get(scenario, {}))
        if bad != listed:
            surprises[scenario] = {
                "failing, not listed": [
                    {k: c.get(k) for k in ("id", "status", "errorMessage")}
                    for c in checks if c["id"] in bad - listed
                ],
                "listed, not failing": sorted(listed - bad),
            }  # fmt: skip
    assert not surprises, json.dumps(surprises, indent=1) + "\n" + output[-3000:]
    # The scenarios this service is about pass outright in both revisions.
    for scenario in ("tools-list", "dns-rebinding-protection", "server-sse-multiple-streams"):
        assert scenario in ran and not failing(ran[scenario]), scenario
    if revision == "2026-07-28":
        assert not failing(ran["server-stateless"]) - set(expected["server-stateless"])
        assert "http-header-validation" in ran and not failing(ran["http-header-validation"])
    else:
        for scenario in ("server-initialize", "ping", "server-session-lifecycle", "prompts-list"):
            assert not failing(ran[scenario]), scenario
    del code  # the exit code counts the expected failures too; the checks above decide


@pytest.fixture
async def metadata_document() -> AsyncIterator[str]:
    """A Client ID Metadata Document served on loopback: its URL (the client id)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/oauth/conformance-client.json"

    async def document(request: web.Request) -> web.Response:
        return web.json_response(
            {
                "client_id": url,
                "client_name": "Conformance suite",
                # No port: the suite's callback may listen on any (RFC 8252 §7.3).
                "redirect_uris": ["http://127.0.0.1/callback"],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "none",
            },
            headers={"Cache-Control": "max-age=60"},
        )

    app = web.Application()
    app.router.add_get("/oauth/conformance-client.json", document)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield url
    finally:
        await runner.cleanup()


async def _approve_in_browser(authorize_url: str, account: Any) -> None:
    """Sign in and approve as a person would, then follow the redirect to the callback."""
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.get(authorize_url, allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
            signin = resp.headers["Location"]
        base = authorize_url.split("/authorize", 1)[0]
        async with browser.get(base + signin) as page:
            fields = dict(hidden(await page.text()))
        async with browser.post(
            base + "/signin",
            data={**fields, "email": account.email, "password": account.password},
            allow_redirects=False,
        ) as resp:
            assert resp.status == 303, await resp.text()
            back = resp.headers["Location"]
        async with browser.get(base + back) as page:
            html = await page.text()
            assert page.status == 200, html
        assert "Conformance suite" in html and "127.0.0.1" in html
        form = forms(html)[0]
        choices = [(n, v) for n, v, _ in form["options"] if n in ("workspace", "grant_scope")]
        data = [*form["fields"], *choices, ("expires", "1d"), ("decision", "approve")]
        async with browser.post(base + "/authorize", data=data, allow_redirects=False) as resp:
            assert resp.status == 303, await resp.text()
            callback = resp.headers["Location"]
        async with browser.get(callback) as resp:
            assert resp.status == 200


async def test_authorization_server(
    node_env: dict[str, str],
    elova: ServeProcesses,
    test_database: TestDatabase,
    metadata_document: str,
    tmp_path: Path,
) -> None:
    pool = await asyncpg.create_pool(test_database.dsn, min_size=1, max_size=1)
    try:
        account = await seed_account(pool, workspaces=1)
    finally:
        await pool.close()
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        str(BIN / "conformance"), "authorization", "--url", elova.public_url,
        "--client-id", metadata_document, "--resource", elova.mcp_url, "--port", str(port),
        "--output-dir", str(tmp_path),
        cwd=TS_DIR, env=node_env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(60):
            while not any("/authorize?" in line for line in lines):
                line = (await proc.stdout.readline()).decode(errors="replace")
                assert line, "".join(lines)
                lines.append(line)
            url = next(x.strip() for x in lines if "/authorize?" in x)
            assert "scope=" not in url  # the suite asks without scope: every scope is offered
            await _approve_in_browser(url, account)
            rest = await proc.stdout.read()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    output = "".join(lines) + rest.decode(errors="replace")
    ran = results(tmp_path)
    checks = [c for scenario in ran.values() for c in scenario]
    statuses = {c["id"]: c["status"] for c in checks}
    assert statuses == {
        "authorization-server-metadata": "SUCCESS",
        "authorization-server-metadata-cimd": "SUCCESS",
        "authorization-code-grant": "SUCCESS",
    }, json.dumps(checks, indent=1) + output
    assert proc.returncode == 0, output
