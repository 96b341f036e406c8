"""tests/support/server.py, which other suites reuse: both kinds of server come up live, share
one configuration across replicas, accept the tokens their `approve` issues, and a start
that fails says why (the server's own message naming the setting)."""

from __future__ import annotations

import aiohttp
import pytest

from tests.clients.dataset import Dataset
from tests.support.server import InProcessServer, ServeProcesses
from tests.support.services import TestDatabase


async def test_in_process_replicas_are_live_and_accept_issued_tokens(
    test_database: TestDatabase, dataset: Dataset
) -> None:
    async with InProcessServer(test_database.dsn, replicas=2, env={"LOG_LEVEL": "ERROR"}) as srv:
        assert len(srv.apps) == 2 and srv.public_url == srv.base_urls[0]
        issued = await srv.approve(account=dataset.account_email, workspaces=dataset.granted)
        body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "helper-test", "version": "1"}}}  # fmt: skip
        async with aiohttp.ClientSession() as http:
            for base in srv.base_urls:
                async with http.get(base + "/livez") as resp:
                    assert resp.status == 200
                headers = {"Authorization": f"Bearer {issued.access_token}"}
                async with http.post(base + "/mcp", json=body, headers=headers) as resp:
                    assert resp.status == 200, await resp.text()
                    assert (await resp.json())["result"]["protocolVersion"] == "2025-11-25"


def test_a_failed_start_reports_the_servers_own_message(test_database: TestDatabase) -> None:
    server = ServeProcesses(test_database.dsn, env={"SIGNING_KEY": "not a key"})
    with pytest.raises(RuntimeError) as caught:
        server.start(timeout=20)
    assert "ELOVA_SIGNING_KEY" in str(caught.value)
