"""`elova-mcp run-demo` as `make run` runs it, in a subprocess, against the test database
(ELOVA_DATABASE_URL set, so no embedded server): it prints the MCP URL and a working token,
serves, stops on Ctrl-C, and a second run reuses the key and the data."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest

from service.demo.document import demo_workspace_ids
from tests.support.mcp_wire import tool_call
from tests.support.services import TestDatabase

ELOVA = Path(sys.executable).with_name("elova-mcp")
ROOT = Path(__file__).parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Demo:
    banner: str
    mcp_url: str
    token: str
    refresh_token: str


def _env(db: TestDatabase, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ELOVA_")}
    env.update(
        ELOVA_DATABASE_URL=db.dsn,
        ELOVA_HOST="127.0.0.1",
        ELOVA_PORT=str(port),
        ELOVA_DB_POOL_MIN="1",
    )
    return env


@asynccontextmanager
async def run_demo(db: TestDatabase, data_dir: Path, port: int) -> AsyncIterator[Demo]:
    proc = await asyncio.create_subprocess_exec(
        str(ELOVA),
        "run-demo",
        "--data-dir",
        str(data_dir),
        env=_env(db, port),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    banner: list[str] = []
    try:
        async with asyncio.timeout(60):
            while True:
                line = (await proc.stdout.readline()).decode()
                if not line:
                    err = (await proc.stderr.read()).decode()
                    raise AssertionError(f"run-demo exited early: {''.join(banner)}\n{err}")
                banner.append(line)
                if "Ctrl-C stops the service" in line:
                    break
        text = "".join(banner)
        url = re.search(r"MCP endpoint\s+(\S+)", text)
        token = re.search(r"export ELOVA_TOKEN=(\S+)", text)
        refresh = re.search(r"-d refresh_token=(\S+)", text)
        assert url and token and refresh, text
        yield Demo(text, url.group(1), token.group(1), refresh.group(1))
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
            try:
                async with asyncio.timeout(20):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
    assert proc.returncode == 0


async def _printed_approve(banner: str) -> dict[str, Any]:
    """Run the `elova-mcp approve` command exactly as the banner prints it."""
    match = re.search(r"\n(\s+ELOVA_DATABASE_URL=.*?)\n\n", banner, re.S)
    assert match, banner
    command = match.group(1).replace("\\\n", " ")
    proc = await asyncio.create_subprocess_shell(
        command, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    result: dict[str, Any] = msgspec.json.decode(out)
    return result


async def _livez(http: aiohttp.ClientSession, base: str) -> int:
    # The banner is printed just before the listener binds: allow it a moment.
    for _ in range(100):
        try:
            async with http.get(f"{base}/livez") as resp:
                return resp.status
        except aiohttp.ClientConnectionError:
            await asyncio.sleep(0.1)
    raise AssertionError("/livez never answered")


async def _post_tool(
    session: aiohttp.ClientSession, url: str, token: str | None, name: str
) -> tuple[int, dict[str, str], bytes]:
    body, headers = tool_call(name, {}, token=token)
    async with session.post(url, data=msgspec.json.encode(body), headers=headers) as r:
        return r.status, dict(r.headers), await r.read()


async def _tool(session: aiohttp.ClientSession, demo: Demo, name: str) -> dict[str, Any]:
    status, _, body = await _post_tool(session, demo.mcp_url, demo.token, name)
    assert status == 200, body
    result: dict[str, Any] = msgspec.json.decode(body)["result"]
    return result


@pytest.mark.timeout(90)  # an embedded PostgreSQL starts, migrates and loads: about 11 s
async def test_run_demo_prints_a_working_token_and_serves(
    test_database: TestDatabase, tmp_path: Path
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    async with run_demo(test_database, tmp_path, port) as demo, aiohttp.ClientSession() as http:
        assert demo.mcp_url == f"{base}/mcp"
        for needle in ("demo@elova.dev", "claude mcp add", "@modelcontextprotocol/inspector",
                       "curl -s", "elova-mcp approve", "per process"):  # fmt: skip
            assert needle in demo.banner
        assert await _livez(http, base) == 200
        result = await _tool(http, demo, "get_many_workspaces")
        listed = result["structuredContent"]["workspaces"]
        assert sorted(w["id"] for w in listed) == sorted(demo_workspace_ids())
        status, headers, _ = await _post_tool(http, demo.mcp_url, None, "get_many_workspaces")
        assert status == 401  # no token, no answer
        assert "resource_metadata=" in headers["WWW-Authenticate"]
        # The printed refresh command works (and rotates: the pair it returns is new).
        client_id = re.search(r"-d client_id=(\S+)", demo.banner)
        assert client_id is not None
        form = {"grant_type": "refresh_token", "client_id": client_id.group(1),
                "refresh_token": demo.refresh_token}  # fmt: skip
        async with http.post(f"{base}/token", data=form) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["refresh_token"] != demo.refresh_token
        renewed = await _printed_approve(demo.banner)
        assert renewed["expiresIn"] == 300
        fresh = Demo(demo.banner, demo.mcp_url, renewed["accessToken"], "")
        assert (await _tool(http, fresh, "get_many_workspaces"))["isError"] is False
        # Renewing the approval moved its generation on: the banner's token is dead now.
        status, _, _ = await _post_tool(http, demo.mcp_url, demo.token, "get_many_workspaces")
        assert status == 401
    key = tmp_path / "signing-key.pem"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    first_key = key.read_bytes()

    # The second run: same key, same records, a renewed approval whose old tokens are dead.
    async with run_demo(test_database, tmp_path, port) as again, aiohttp.ClientSession() as http:
        assert f"existing key {key}" in again.banner
        assert await _livez(http, base) == 200
        result = await _tool(http, again, "get_many_workspaces")
        assert result["isError"] is False
    assert key.read_bytes() == first_key


async def test_run_demo_refuses_a_busy_port_before_printing_tokens(
    test_database: TestDatabase, tmp_path: Path
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = await asyncio.create_subprocess_exec(
            str(ELOVA),
            "run-demo",
            "--data-dir",
            str(tmp_path),
            env=_env(test_database, port),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert b"ELOVA_TOKEN" not in out
    assert f"cannot listen on 127.0.0.1:{port}".encode() in err
