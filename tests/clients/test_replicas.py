"""Real clients behind a round-robin load balancer over two `elova-mcp serve` replicas, with no
session affinity: a session begun on one replica continues on the other (docs/protocol.md, any
replica serves any request). The test proxy plays the balancer."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from tests.clients.checks import EXPECTED_VERSION, check_listing, check_result, plan, wire
from tests.clients.dataset import Dataset
from tests.clients.node import TS_DIR, run
from tests.clients.proxy import BearerProxy
from tests.support.server import ServeProcesses
from tests.support.services import TestDatabase


@pytest.fixture(scope="module")
def two_replicas(test_database: TestDatabase) -> Iterator[ServeProcesses]:
    with ServeProcesses(test_database.dsn, replicas=2) as server:
        yield server


async def balancer(server: ServeProcesses, data: Dataset) -> BearerProxy:
    issued = await server.approve(account=data.account_email, workspaces=data.granted)
    return BearerProxy(server.base_urls, issued.access_token)


def spread(proxy: BearerProxy, session_only: bool) -> set[str]:
    """The replicas that served requests (those carrying a session id, if asked)."""
    return {
        e.upstream
        for e in proxy.exchanges
        if e.method == "POST" and (not session_only or e.session_id is not None)
    }


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_python_client_across_replicas(
    two_replicas: ServeProcesses, dataset: Dataset, mode: str
) -> None:
    async with (
        await balancer(two_replicas, dataset) as proxy,
        httpx2.AsyncClient(timeout=30) as http,
        Client(streamable_http_client(proxy.url, http_client=http), mode=mode) as client,
    ):
        assert client.protocol_version == EXPECTED_VERSION[mode]
        check_listing([wire(t) for t in (await client.list_tools()).tools])
        for tool, arguments in plan(dataset):
            check_result(tool, wire(await client.call_tool(tool, arguments)), dataset)
    assert spread(proxy, session_only=mode == "legacy") == set(two_replicas.base_urls)


async def test_typescript_client_across_replicas(
    node_env: dict[str, str], two_replicas: ServeProcesses, dataset: Dataset
) -> None:
    calls = plan(dataset)
    async with await balancer(two_replicas, dataset) as proxy:
        done = await run(
            ["node", str(TS_DIR / "call_tools.mjs"), proxy.url],
            {**node_env, "ELOVA_TOKEN": proxy.token},
            stdin=json.dumps({"calls": calls}).encode(),
        )
    assert done.returncode == 0, done.describe()
    out = json.loads(done.stdout)
    check_listing(out["tools"])
    for item in out["results"]:
        check_result(item["tool"], item["result"], dataset)
    assert spread(proxy, session_only=True) == set(two_replicas.base_urls)
    # The session ends with DELETE; it went to one replica and counts for both.
    assert any(e.method == "DELETE" and e.statuses in ([200], [204]) for e in proxy.exchanges)
