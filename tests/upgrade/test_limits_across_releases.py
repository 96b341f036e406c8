"""A rolling deploy keeps the shared limits exact (issue 39): while a replica of the release
before per-replica admission serves beside a replica of this one, on one Redis, an
account's calls over both are admitted 2 at a time, never more. In standalone mode this
release keeps the earlier key names (ELOVA_REDIS_KEY_LAYOUT=one-slot, docs/operations.md,
Upgrading), so both count the account in one ledger.

The earlier release is the newest commit of main's line without
service/limits/replica_slots.py, taken from git history (tests/support/releases.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.limits.conftest import key_prefix  # noqa: F401  (a fixture)
from tests.limits.test_multiprocess import (  # noqa: F401  (fixtures)
    Answer,
    Client,
    Probe,
    Seeder,
    probe,
    replica_env,
    seed_config,
    seeder,
)
from tests.support.mcp_wire import tool_call
from tests.support.releases import (
    ROOT,
    NoEarlierRelease,
    Replica,
    describe,
    missing_dependency,
    release_before,
    release_tree,
)
from tests.support.server import free_port

pytestmark = [pytest.mark.slow, pytest.mark.alone]

MARKER = Path("service/limits/replica_slots.py")


async def _call(http: aiohttp.ClientSession, replica: Replica, client: Client, n: int) -> Answer:
    body, headers = tool_call("get_many_workspaces", {}, token=client.token, client="upgrade")
    async with http.post(replica.base_url + "/mcp", json=body, headers=headers) as resp:
        return Answer(resp.status, dict(resp.headers), await resp.json(), n)


async def test_an_accounts_cap_holds_across_an_old_and_a_new_replica(
    replica_env: dict[str, str],  # noqa: F811
    seeder: Seeder,  # noqa: F811
    probe: Probe,  # noqa: F811
) -> None:
    try:
        commit = release_before([MARKER])
    except NoEarlierRelease as err:
        pytest.fail(f"no earlier release to run beside this one: {err}")
    busy = await seeder.account(approvals=2)
    with release_tree(commit) as old_root:
        missing = missing_dependency(old_root)
        if missing is not None:
            pytest.fail(f"the release {describe(commit)} needs {missing}")
        old = Replica(old_root, replica_env, free_port())
        new = Replica(ROOT, replica_env, free_port())
        await asyncio.to_thread(old.start)
        try:
            await asyncio.to_thread(new.start)
            try:
                async with aiohttp.ClientSession() as http:
                    await probe.lock()
                    calls = [
                        asyncio.create_task(_call(http, (old, new)[n % 2], busy[(n // 2) % 2], n))
                        for n in range(12)
                    ]
                    steady = await probe.watch(2.6)  # past the new replica's wait for a slot
                    await probe.unlock()
                    answers = await asyncio.gather(*calls)
            finally:
                await asyncio.to_thread(new.stop)
        finally:
            await asyncio.to_thread(old.stop)
    assert steady == 2 and probe.max_seen == 2, (describe(commit), probe.max_seen)
    assert sum(a.status == 200 for a in answers) == 2
    limits = {a.body["error"]["data"]["limit"] for a in answers if a.status != 200}
    assert limits == {"account"}
