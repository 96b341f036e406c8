"""TLS in every Redis mode (issue 12): a standalone server, a Cluster (`tls-cluster`) and a
Sentinel set (sentinels, master and replication over TLS; the sentinels with a password
of their own), all with a password and a throwaway CA (tests/support/tls.py). The service
is given `rediss://` and the CA through redis-py's `ssl_ca_certs` URL option; the
certificate and host name are verified."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.limits.conftest import ENGINE_PASSWORD, StartReplica
from tests.limits.traffic import admission, assert_shared_and_clean, readyz_redis, run_traffic
from tests.support.engines_redis import Node, RedisClusterSet, RedisSentinelSet, Tls
from tests.support.server import free_port
from tests.support.services import new_redis_prefix
from tests.support.tls import make_tls

# outages reported within bounded seconds: run with no other test beside
pytestmark = pytest.mark.alone

SENTINELS_PW = "elova-sentinels-pw"  # the sentinels' own password, not the master's


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Tls:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def tls_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("redis-tls")


@pytest.fixture(scope="module")
def tls_standalone(tls: Tls, tls_folder: Path) -> Iterator[Node]:
    node = Node(free_port(), tls_folder / "standalone", ["--requirepass", ENGINE_PASSWORD],
                ENGINE_PASSWORD, tls)  # fmt: skip
    try:
        node.start()
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def tls_cluster(tls: Tls, tls_folder: Path) -> Iterator[RedisClusterSet]:
    cluster = RedisClusterSet(tls_folder / "cluster", password=ENGINE_PASSWORD, tls=tls)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def tls_sentinels(tls: Tls, tls_folder: Path) -> Iterator[RedisSentinelSet]:
    found = RedisSentinelSet(
        tls_folder / "sentinel", password=ENGINE_PASSWORD, tls=tls, sentinel_password=SENTINELS_PW
    )
    try:
        found.start()
        yield found
    finally:
        found.stop()


async def _serves_shared(start_replica: StartReplica, **settings: str) -> None:
    settings["REDIS_KEY_PREFIX"] = new_redis_prefix()
    one, two = await start_replica(**settings), await start_replica(**settings)
    assert await readyz_redis(one) == "ok"
    assert_shared_and_clean(await run_traffic([admission(one), admission(two)], seconds=0.6))


async def test_standalone_over_tls(
    start_replica: StartReplica, tls_standalone: Node, tls: Tls
) -> None:
    url = f"rediss://:{ENGINE_PASSWORD}@127.0.0.1:{tls_standalone.port}/0?ssl_ca_certs={tls.ca}"
    await _serves_shared(start_replica, REDIS_URL=url)


async def test_cluster_over_tls(start_replica: StartReplica, tls_cluster: RedisClusterSet) -> None:
    await _serves_shared(start_replica, REDIS_MODE="cluster", REDIS_URL=tls_cluster.url(1))


async def test_sentinel_over_tls_with_a_sentinel_password(
    start_replica: StartReplica, tls_sentinels: RedisSentinelSet
) -> None:
    await _serves_shared(
        start_replica,
        REDIS_MODE="sentinel",
        REDIS_SENTINELS=tls_sentinels.sentinel_setting,
        REDIS_SENTINEL_MASTER=tls_sentinels.name,
        REDIS_URL=tls_sentinels.url(),
        REDIS_SENTINEL_PASSWORD=SENTINELS_PW,
    )


async def test_tls_without_the_ca_is_refused_and_reported(
    start_replica: StartReplica, tls_standalone: Node
) -> None:
    """The certificate is verified: without the CA the limiter does not work, and says so."""
    url = f"rediss://:{ENGINE_PASSWORD}@127.0.0.1:{tls_standalone.port}/0"
    replica = await start_replica(REDIS_URL=url)
    assert await readyz_redis(replica) == "degraded"
