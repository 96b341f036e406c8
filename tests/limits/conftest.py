"""Fixtures for the limits tests: real Redis (the machine's, under a fresh key prefix, or a
private redis-server this test starts and stops), callers, and a metrics recorder."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
import redis.asyncio as aioredis
from aiohttp import web
from aiohttp.test_utils import TestClient

from service.app import create_app
from service.auth.caller import ALL_SCOPES, Caller
from service.config import Config
from service.limits.admission import Admission
from service.limits.redis_client import REDIS_TIMEOUT_SECONDS, make_client
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits
from tests.support.engines_redis import RedisClusterSet, RedisSentinelSet
from tests.support.services import REDIS_URL


class RecordingMetrics(Metrics):
    """The real metrics, also remembering what the limiter reported, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.recorded_refused: list[str] = []
        self.recorded_degraded: list[bool] = []
        self.recorded_redis_calls: list[tuple[str, float, bool]] = []

    def limit_refused(self, limit: str) -> None:
        self.recorded_refused.append(limit)
        super().limit_refused(limit)

    def limiter_degraded(self, degraded: bool) -> None:
        self.recorded_degraded.append(degraded)
        super().limiter_degraded(degraded)

    def redis_call(self, operation: str, seconds: float, error: bool) -> None:
        self.recorded_redis_calls.append((operation, seconds, error))
        super().redis_call(operation, seconds, error)


def make_caller(account_id: UUID | None = None, approval_id: UUID | None = None) -> Caller:
    return Caller.build(
        account_id=account_id or uuid4(),
        approval_id=approval_id or uuid4(),
        generation=1,
        client_id="limits-test",
        scopes=frozenset(ALL_SCOPES),
        eligible={},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A private redis-server on a free port, nothing persisted, stoppable at will."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not installed")
        self.proc = subprocess.Popen(
            [
                exe,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--enable-debug-command",
                "yes",
                "--dir",
                str(self.folder),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("private redis-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(5)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
async def redis_client() -> AsyncIterator[aioredis.Redis]:
    """A plain client on the machine's Redis, for looking at what the scripts wrote."""
    client = aioredis.Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


MakeAdmission = Callable[..., Admission]


@pytest.fixture
def key_prefix(redis_prefix: str) -> str:
    """A key prefix of this test's own, under the run's prefix."""
    return f"{redis_prefix}{secrets.token_hex(4)}:"


@pytest.fixture
async def make_admission(
    key_prefix: str, metrics: RecordingMetrics
) -> AsyncIterator[MakeAdmission]:
    """Build an Admission on a Redis URL (default: the machine's) under a prefix unique to
    this test; keyword arguments override `Limits` fields. Everything built is closed, and
    the keys it wrote are deleted, at the end."""
    made: list[tuple[Admission, aioredis.Redis | None]] = []

    def build(url: str | None = REDIS_URL, **limits: Any) -> Admission:
        # On the shared Redis the tests are about the limits, not about timeouts: a generous
        # timeout keeps a loaded machine's slow event loop from refusing spuriously. Private
        # servers and closed ports (the degraded-mode tests) keep the production timeout.
        timeout = limits.pop("timeout", 1.0 if url == REDIS_URL else REDIS_TIMEOUT_SECONDS)
        client = make_client(url, timeout=timeout) if url else None
        admission = Admission(
            replace(Limits(), **limits),
            redis=client,
            key_prefix=key_prefix,
            metrics=metrics,
            timeout_seconds=timeout,
        )
        made.append((admission, client))
        return admission

    yield build
    for admission, client in made:
        await admission.close()
        if client is not None:
            await client.aclose()
    cleaner = aioredis.Redis.from_url(REDIS_URL)
    keys = [k async for k in cleaner.scan_iter(match=f"{key_prefix}*")]
    if keys:
        await cleaner.delete(*keys)
    await cleaner.aclose()


async def wait_for(check: Callable[[], Any], timeout: float = 3.0) -> None:
    """Poll an async or plain predicate until it holds (or fail after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


# Real Redis engines (issue 12), one set of each per test session ------------------------

ENGINE_PASSWORD = "elova-engines-pw"


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterSet]:
    """Three masters with a password, on free loopback ports, for the whole session."""
    cluster = RedisClusterSet(tmp_path_factory.mktemp("redis-cluster"), password=ENGINE_PASSWORD)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelSet]:
    """A master, a replica and three sentinels, with a password, for the whole session
    (a failover test leaves the old replica as the master)."""
    found = RedisSentinelSet(tmp_path_factory.mktemp("redis-sentinel"), password=ENGINE_PASSWORD)
    try:
        found.start()
        yield found
    finally:
        found.stop()


# Whole replicas (the app in process) on those engines ------------------------------------

ENGINE_CAP = 4  # the account cap the engine tests contend for across two replicas
ENGINE_LIMITS = {
    "LIMIT_GLOBAL_CONCURRENCY": "1000",
    "LIMIT_ACCOUNT_CONCURRENCY": str(ENGINE_CAP),
    # Refused at once rather than after a wait for a slot: the traffic counts refusals to
    # show that the cap was contended (the wait has tests of its own).
    "LIMIT_SLOT_WAIT_MS": "0",
    "LIMIT_APPROVAL_PER_MINUTE": "1000000",
    "EXPECTED_REPLICAS": "2",
    # Leases a dead master's replica may still hold after a failover free themselves soon.
    "REQUEST_DEADLINE_SECONDS": "2",
    "LEASE_GRACE_SECONDS": "0.5",
    "REDIS_TIMEOUT_MS": "500",
}

AppClient = TestClient[web.Request, web.Application]
StartReplica = Callable[..., Awaitable[AppClient]]


@pytest.fixture
def start_replica(
    aiohttp_client: Callable[..., Awaitable[AppClient]], make_config: Callable[..., Config]
) -> StartReplica:
    """One replica (the whole app, in process, with its background health check); keyword
    overrides are ELOVA_* settings on top of ENGINE_LIMITS."""

    async def start(**overrides: Any) -> AppClient:
        return await aiohttp_client(create_app(make_config(**{**ENGINE_LIMITS, **overrides})))

    return start
