"""Sign-in behind the shipped HAProxy configuration (deploy/haproxy.cfg, its frontend as
shipped, its backend pointed at one in-process replica on loopback). The replica trusts
only HAProxy's address (127.0.0.1); browsers connect to HAProxy from other loopback
addresses (127.0.0.2, 127.0.0.3), so the replica can tell them apart only through the
X-Forwarded-For that HAProxy writes, and a client's own forwarding headers never count."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import asyncpg
import pytest

from service.config import Config
from tests.auth.flow import hidden, seed_account
from tests.ops.tooling import ROOT, require
from tests.support.server import InProcessServer, free_port
from tests.support.services import TestDatabase

DEPLOY = ROOT / "deploy"
HAPROXY_ADDRESS = "127.0.0.1"  # the source address HAProxy connects to a loopback backend from


def local_haproxy_config(front_port: int, backend_port: int) -> str:
    """deploy/haproxy.cfg listening on a loopback port, its backend one local server."""
    text = (DEPLOY / "haproxy.cfg").read_text()
    text = re.sub(r"^(\s*)bind \S+", rf"\1bind 127.0.0.1:{front_port}", text, flags=re.M)
    text = re.sub(r"^\s*server \S+ .*\n", "", text, flags=re.M)
    return re.sub(
        r"^(backend replicas\n)",
        rf"\1    server local 127.0.0.1:{backend_port}\n",
        text,
        flags=re.M,
    )


async def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(100):
        if proc.poll() is not None:
            raise AssertionError(f"haproxy exited with {proc.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        await writer.wait_closed()
        return
    raise AssertionError("haproxy did not listen")


@pytest.fixture
async def haproxy_front(
    test_database: TestDatabase, tmp_path: Path
) -> AsyncIterator[tuple[str, Config]]:
    binary = require("haproxy")
    env = {"TRUSTED_PROXIES": f"{HAPROXY_ADDRESS}/32", "LOG_LEVEL": "INFO"}
    async with InProcessServer(test_database.dsn, env=env) as server:
        front = free_port()
        cfg_path = tmp_path / "haproxy.cfg"
        cfg_path.write_text(local_haproxy_config(front, server.ports[0]))
        proc = subprocess.Popen(
            [binary, "-db", "-f", str(cfg_path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await _wait_for_port(front, proc)
            yield f"http://127.0.0.1:{front}", server.config()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def _browser(address: str) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.CookieJar(unsafe=True))


async def _signin(http: aiohttp.ClientSession, base: str, email: str, password: str) -> int:
    async with http.get(f"{base}/signin") as page:
        fields = dict(hidden(await page.text()))
    async with http.post(
        f"{base}/signin",
        data={**fields, "email": email, "password": password},
        allow_redirects=False,
    ) as resp:
        return resp.status


def _last_client(lines: io.StringIO, path: str) -> str:
    seen = [json.loads(line) for line in lines.getvalue().splitlines()]
    client: str = [line for line in seen if line.get("path") == path][-1]["client"]
    return client


async def test_the_replica_sees_the_client_haproxy_saw_and_never_its_own_headers(
    haproxy_front: tuple[str, Config], access_lines: io.StringIO
) -> None:
    base, _ = haproxy_front
    spoofing = {"X-Forwarded-For": "6.6.6.6", "Forwarded": "for=7.7.7.7"}
    async with _browser("127.0.0.2") as http, http.get(f"{base}/livez", headers=spoofing) as r:
        assert r.status == 200
    assert _last_client(access_lines, "/livez") == "127.0.0.2"


@pytest.mark.timeout(60)
async def test_thirty_failures_behind_haproxy_do_not_lock_out_anyone_else(
    haproxy_front: tuple[str, Config], access_lines: io.StringIO
) -> None:
    base, cfg = haproxy_front
    pool = await asyncpg.create_pool(cfg.database_url, min_size=1, max_size=2)
    assert pool is not None
    try:
        owner = await seed_account(pool, workspaces=1)
    finally:
        await pool.close()
    async with _browser("127.0.0.2") as attacker, _browser("127.0.0.3") as person:
        # A stranger's wrong passwords for the owner's account, then a spray over others.
        for _ in range(cfg.signin_throttle.free_failures + 1):
            assert await _signin(attacker, base, owner.email, "guess") == 401
        for i in range(cfg.signin_throttle.address_failures):
            email = f"guess{i}-{uuid.uuid4().hex[:6]}@example.test"
            assert await _signin(attacker, base, email, "guess") in (401, 429)
        assert await _signin(attacker, base, owner.email, owner.password) == 429
        # The owner, behind the same proxy, is not locked out.
        assert await _signin(person, base, owner.email, owner.password) == 303
    assert _last_client(access_lines, "/signin") == "127.0.0.3"


def test_compose_trusts_the_network_only_haproxy_and_the_replicas_share() -> None:
    # Read as text: the YAML parser of the ops tests lives in the tools venv.
    text = (DEPLOY / "compose.yaml").read_text()
    trusted = re.findall(r"^\s+ELOVA_TRUSTED_PROXIES: (\S+)$", text, re.M)
    subnet = re.findall(r"^\s+edge:\n\s+ipam:\n\s+config:\n\s+- subnet: (\S+)$", text, re.M)
    assert trusted == subnet == ["172.28.0.0/24"]
    assert re.search(r"^  lb:\n(?:    .*\n|      .*\n)*?    networks: \[edge\]$", text, re.M)
    for replica in ("mcp-1", "mcp-2"):
        assert re.search(rf"^  {replica}:\n    <<: \*elova-mcp\n    networks: \[default, edge\]$",
                         text, re.M)  # fmt: skip
    haproxy = (DEPLOY / "haproxy.cfg").read_text()
    frontend = haproxy.split("frontend mcp", 1)[1].split("\nbackend", 1)[0]
    lines = [line.strip() for line in frontend.splitlines()]
    drop_xff = lines.index("http-request del-header X-Forwarded-For")
    assert drop_xff < lines.index("option forwardfor")
    assert "http-request del-header Forwarded" in lines
