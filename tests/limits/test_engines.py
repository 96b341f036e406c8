"""Issue 12: the limiter on the Redis engines production uses, started by the suite itself
(tests/support/engines_redis.py): a three-master Redis Cluster and a Sentinel set, both
with a password. Each test runs two replicas (two apps, each with its own client) against
one engine and checks what an operator would: the shared cap is never exceeded, nothing
fails, and /readyz and the degraded metric tell the truth."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID, uuid4

import pytest
from redis.crc import key_slot

from service.limits.admission import Admission
from service.limits.redis_routes import ClusterRoute, StandaloneRoute
from tests.limits.conftest import (
    ENGINE_CAP,
    ENGINE_PASSWORD,
    AppClient,
    RedisServer,
    StartReplica,
    make_caller,
    wait_for,
)
from tests.limits.traffic import (
    Tally,
    account_key,
    account_owned_by,
    admission,
    assert_shared_and_clean,
    degraded_metric,
    readyz_redis,
    run_traffic,
)
from tests.support.engines_redis import Node, RedisClusterSet, RedisSentinelSet
from tests.support.services import new_redis_prefix

# failovers and switchovers followed within bounded seconds: run with no other test beside
pytestmark = pytest.mark.alone

# Redis Cluster ------------------------------------------------------------------------


async def cluster_replicas(
    start_replica: StartReplica, cluster: RedisClusterSet, prefix: str, account: UUID
) -> tuple[AppClient, AppClient, int]:
    """Two replicas, each pointed at a master that does NOT own the account's slot."""
    owner = cluster.owner_of(account_key(prefix, account))
    others = [i for i in range(3) if i != owner]
    replicas = [
        await start_replica(
            REDIS_MODE="cluster", REDIS_URL=cluster.url(node), REDIS_KEY_PREFIX=prefix
        )
        for node in others
    ]
    return replicas[0], replicas[1], owner


async def test_cluster_from_non_owner_nodes_keeps_limits_shared(
    start_replica: StartReplica, redis_cluster: RedisClusterSet
) -> None:
    prefix = new_redis_prefix()
    account = uuid4()
    one, two, _ = await cluster_replicas(start_replica, redis_cluster, prefix, account)
    assert await readyz_redis(one) == "ok" and await readyz_redis(two) == "ok"
    tally = await run_traffic([admission(one), admission(two)], seconds=1.5, account=account)
    assert_shared_and_clean(tally)
    assert degraded_metric(one) == 0 and degraded_metric(two) == 0


async def test_cluster_slot_migrated_during_traffic_keeps_limits_shared(
    start_replica: StartReplica, redis_cluster: RedisClusterSet
) -> None:
    prefix = new_redis_prefix()
    account = uuid4()
    key = account_key(prefix, account)
    one, two, owner = await cluster_replicas(start_replica, redis_cluster, prefix, account)
    target = (owner + 1) % 3
    limiters = [admission(one), admission(two)]
    traffic = asyncio.ensure_future(run_traffic(limiters, seconds=2.5, account=account))
    await asyncio.sleep(0.8)
    moved_keys = await asyncio.to_thread(redis_cluster.migrate_slot, key, target)
    tally = await traffic
    assert redis_cluster.owner_of(key) == target
    assert moved_keys >= 1  # the account's lease set at least (its limits moved with the slot)
    assert_shared_and_clean(tally)
    for limiter in limiters:
        assert limiter.pipeline is not None
        route = limiter.pipeline.route
        assert isinstance(route, ClusterRoute)
        assert route.owner(key_slot(key.encode())) == (
            f"127.0.0.1:{redis_cluster.nodes[target].port}"
        )
        assert limiter.pipeline.followed["MovedError"] >= 1  # and ASK / TRYAGAIN meanwhile
    assert await readyz_redis(one) == "ok" and degraded_metric(one) == 0


@pytest.fixture
def redis_cluster_with_replica(tmp_path: Path) -> Iterator[RedisClusterSet]:
    """A cluster of its own (this test kills a master): the limiter's master has a replica."""
    cluster = RedisClusterSet(tmp_path / "cluster", password=ENGINE_PASSWORD, replica=True)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


async def test_cluster_failover_of_the_limiters_master_is_followed(
    start_replica: StartReplica, redis_cluster_with_replica: RedisClusterSet
) -> None:
    """The master owning an account's slot dies mid-traffic; the cluster promotes its
    replica (cluster-node-timeout 2 s) and both replicas of ours follow: per-process limits
    meanwhile, shared limits again on the promoted node."""
    cluster = redis_cluster_with_replica
    prefix = new_redis_prefix()
    account = account_owned_by(cluster, prefix, 0)  # the master with a replica
    key = account_key(prefix, account)
    one, two, _ = await cluster_replicas(start_replica, cluster, prefix, account)
    limiters = [admission(one), admission(two)]
    tally = Tally()
    traffic = asyncio.ensure_future(
        run_traffic(limiters, seconds=15.0, tally=tally, account=account)
    )
    await asyncio.sleep(0.5)
    cluster.nodes[0].kill()
    killed = time.monotonic()
    tally.mark_now()
    await wait_for(lambda: degraded_metric(one) == 1, timeout=5.0)
    await wait_for(lambda: tally.first_shared_after is not None, timeout=12.0)
    assert tally.first_shared_after is not None
    followed = tally.first_shared_after - killed
    # Until gossip reaches every node, one may still name the dead master: a slot map read
    # from it sends the limiters there again (per-process limits, then back). The clean
    # traffic below is judged once the cluster agrees on the promoted replica.
    await wait_for(lambda: cluster.owners_of(key) == {3}, timeout=10.0)  # the promoted replica
    await wait_for(lambda: not any(limiter.degraded for limiter in limiters), timeout=5.0)
    traffic.cancel()
    await asyncio.gather(traffic, return_exceptions=True)
    assert cluster.owner_of(key) == 3
    assert_shared_and_clean(await run_traffic(limiters, seconds=0.8, account=account))
    assert tally.errors == [] and tally.max_in_flight <= ENGINE_CAP
    assert await readyz_redis(one) == "ok" and await readyz_redis(two) == "ok"
    print(f"cluster failover followed: first shared admission {followed:.2f} s after the kill")


async def test_standalone_mode_on_a_cluster_node_is_reported_degraded(
    start_replica: StartReplica, redis_cluster: RedisClusterSet
) -> None:
    """A node that answers but redirects the script (MOVED) is not a working limiter: the
    health check's call (on an account no one has) is sent to a node without its slot."""
    prefix = new_redis_prefix()
    owner = redis_cluster.owner_of(account_key(prefix, UUID(int=0)))
    replica = await start_replica(
        REDIS_URL=redis_cluster.url((owner + 1) % 3), REDIS_KEY_PREFIX=prefix
    )
    assert await readyz_redis(replica) == "degraded"
    await wait_for(lambda: degraded_metric(replica) == 1, timeout=5.0)
    assert admission(replica).degraded


def _spread(count: int) -> list[UUID]:
    """`count` accounts, a third on each master's slots (RedisClusterSet's three ranges).
    Random ids put 10 or more of 20 accounts on one master about one run in four, and the
    busiest master's share then says nothing about how the keys are placed."""
    found: list[list[UUID]] = [[], [], []]
    while any(len(third) < count // 3 for third in found):
        account = uuid4()
        slot = key_slot(str(account).encode())
        third = found[0 if slot <= 5460 else 1 if slot <= 10922 else 2]
        if len(third) < count // 3:
            third.append(account)
    return [account for third in found for account in third]


async def test_many_accounts_spread_their_admissions_over_the_masters(
    start_replica: StartReplica, redis_cluster: RedisClusterSet
) -> None:
    """Each admission's keys live on its account's slot: calls from many accounts over two
    replicas reach all three masters, the busiest serving at most half of the script calls,
    and no account's cap is exceeded."""

    def script_calls() -> list[int]:
        counts = []
        for node in redis_cluster.nodes[:3]:
            with node.client() as c:
                stats = c.info("commandstats")
                counts.append(int(stats.get("cmdstat_evalsha", {}).get("calls", 0)))
        return counts

    prefix = new_redis_prefix()
    replicas = [
        await start_replica(
            REDIS_MODE="cluster", REDIS_URL=redis_cluster.url(n), REDIS_KEY_PREFIX=prefix
        )
        for n in range(2)
    ]
    limiters = [admission(r) for r in replicas]
    before = script_calls()
    tallies = await asyncio.gather(
        *(run_traffic(limiters, seconds=1.5, workers=6, account=a) for a in _spread(21))
    )
    served = [after - was for after, was in zip(script_calls(), before, strict=True)]
    for tally in tallies:
        assert tally.errors == [] and tally.unanswered == 0 and tally.local == 0
        assert tally.max_in_flight <= ENGINE_CAP
    total = sum(served)
    assert total >= 2 * sum(t.shared for t in tallies)  # an admission and a release each
    assert max(served) <= total / 2, served
    assert min(served) > 0, served
    print(f"script calls by master: {served}")


async def test_a_hash_tag_in_the_prefix_pins_every_key_to_its_slot(
    start_replica: StartReplica, redis_cluster: RedisClusterSet
) -> None:
    tag = new_redis_prefix().rstrip(":")
    prefix = f"svc{{{tag}}}:"
    replica = await start_replica(
        REDIS_MODE="cluster", REDIS_URL=redis_cluster.url(0), REDIS_KEY_PREFIX=prefix
    )
    limiter = admission(replica)
    grant = await limiter.acquire("tagged", make_caller())
    assert grant.shared
    with redis_cluster.nodes[0].client() as c:
        slots = {
            int(c.execute_command("CLUSTER", "KEYSLOT", key))
            for key in limiter.keys(grant.account_id, grant.approval_id)
        }
        assert slots == {int(c.execute_command("CLUSTER", "KEYSLOT", tag))}
    await limiter.release(grant)


# Redis Sentinel -----------------------------------------------------------------------


async def sentinel_replicas(
    start_replica: StartReplica, sentinels: RedisSentinelSet
) -> tuple[AppClient, AppClient]:
    prefix = new_redis_prefix()
    settings = {
        "REDIS_MODE": "sentinel",
        "REDIS_SENTINELS": sentinels.sentinel_setting,
        "REDIS_SENTINEL_MASTER": sentinels.name,
        "REDIS_URL": sentinels.url(),  # the password only: no host
        "REDIS_KEY_PREFIX": prefix,
    }
    return await start_replica(**settings), await start_replica(**settings)


async def followed_to_new_master(
    limiters: list[Admission], sentinels: RedisSentinelSet, old: Node, *, named_within: float
) -> Node:
    """The master sentinels[0] names once it no longer names `old` (within `named_within`
    seconds), after each limiter's route points at it (within 5 s more)."""
    await wait_for(lambda: sentinels.master_port() != old.port, timeout=named_within)
    new = sentinels.master()
    for limiter in limiters:
        assert limiter.pipeline is not None
        route = limiter.pipeline.route
        assert isinstance(route, StandaloneRoute)

        def on_new_master(r: StandaloneRoute = route) -> bool:
            return r.address == ("127.0.0.1", new.port)

        await wait_for(on_new_master, timeout=5.0)
    return new


async def test_sentinel_keeps_limits_shared(
    start_replica: StartReplica, redis_sentinels: RedisSentinelSet
) -> None:
    one, two = await sentinel_replicas(start_replica, redis_sentinels)
    assert await readyz_redis(one) == "ok"
    tally = await run_traffic([admission(one), admission(two)], seconds=1.0)
    assert_shared_and_clean(tally)


async def test_sentinel_switchover_mid_traffic_is_followed(
    start_replica: StartReplica, redis_sentinels: RedisSentinelSet
) -> None:
    """SENTINEL FAILOVER while both replicas serve. The sentinels name the new master about
    1 s after the command, but the old master takes writes until they demote it (~10 s
    later): each replica moves to the new master within 0.5 s of the sentinels naming it
    (limiter_health.py), well before the old master would refuse. Admissions taken on the old
    master after the promotion are not on the new one, so for the length of those
    requests up to twice the cap may run (docs/operations.md); after that, the cap holds."""
    one, two = await sentinel_replicas(start_replica, redis_sentinels)
    limiters = [admission(one), admission(two)]
    old = redis_sentinels.master()
    tally = Tally()
    traffic = asyncio.ensure_future(run_traffic(limiters, seconds=8.0, tally=tally))
    await asyncio.sleep(0.5)
    with redis_sentinels.sentinels[0].client() as sentinel:
        sentinel.execute_command("SENTINEL", "FAILOVER", redis_sentinels.name)
    switched = time.monotonic()
    # the health check moves both off the old master
    new = await followed_to_new_master(limiters, redis_sentinels, old, named_within=10.0)
    moved = time.monotonic() - switched
    await wait_for(lambda: not any(limiter.degraded for limiter in limiters), timeout=5.0)
    traffic.cancel()
    await asyncio.gather(traffic, return_exceptions=True)
    after = await run_traffic(limiters, seconds=0.8)
    assert_shared_and_clean(after)
    grant = await limiters[0].acquire("after-switchover", make_caller())
    assert grant.shared
    with new.client() as c:  # the limits now live on the new master
        assert c.execute_command("ROLE")[0] == "master"
        global_leases = limiters[0].keys(grant.account_id, grant.approval_id)[0]
        assert c.zscore(global_leases, "after-switchover") is not None
    await limiters[0].release(grant)
    assert tally.errors == [] and tally.max_in_flight <= 2 * ENGINE_CAP, tally
    assert await readyz_redis(one) == "ok" and await readyz_redis(two) == "ok"
    print(
        f"sentinel switchover: both replicas on the new master {moved:.2f} s after the"
        f" command; at most {tally.max_in_flight} in flight under a cap of {ENGINE_CAP}"
    )


async def test_sentinel_failover_mid_traffic_is_followed(
    start_replica: StartReplica, redis_sentinels: RedisSentinelSet
) -> None:
    """The master is killed while both replicas serve: per-process limits while the
    sentinels fail over (readyz says so), then shared limits again on the new master."""
    one, two = await sentinel_replicas(start_replica, redis_sentinels)
    limiters = [admission(one), admission(two)]
    old = redis_sentinels.master()
    tally = Tally()
    traffic = asyncio.ensure_future(run_traffic(limiters, seconds=18.0, tally=tally))
    try:
        await asyncio.sleep(0.5)
        assert tally.shared > 0
        old.kill()
        killed = time.monotonic()
        tally.mark_now()
        await wait_for(lambda: degraded_metric(one) == 1, timeout=5.0)
        assert await readyz_redis(one) == "degraded"
        await wait_for(lambda: tally.first_shared_after is not None, timeout=15.0)
        assert tally.first_shared_after is not None
        followed = tally.first_shared_after - killed
        # The limiter asks the sentinels in turn and takes the first that names a master
        # up; sentinels[0] may learn of the promotion from the others' hello messages (every
        # 2 s) after that, so the test waits for it to agree before naming the new master.
        await followed_to_new_master(limiters, redis_sentinels, old, named_within=5.0)
        await wait_for(lambda: not limiters[0].degraded and not limiters[1].degraded, timeout=5.0)
        assert await readyz_redis(one) == "ok" and await readyz_redis(two) == "ok"
        assert degraded_metric(one) == 0 and degraded_metric(two) == 0
    finally:  # a failed assertion must not leave the traffic running into the next test
        traffic.cancel()
        await asyncio.gather(traffic, return_exceptions=True)
    after = Tally()
    await run_traffic(limiters, seconds=1.0, tally=after)
    assert_shared_and_clean(after)
    assert tally.errors == []
    assert tally.max_in_flight <= ENGINE_CAP
    print(f"sentinel failover followed: first shared admission {followed:.2f} s after the kill")


# An idle replica: the schedule, not requests, notices -----------------------------------


async def test_idle_replica_reports_outage_and_recovery_within_seconds(
    start_replica: StartReplica, redis_server: RedisServer
) -> None:
    replica = await start_replica(REDIS_URL=redis_server.url, REDIS_TIMEOUT_MS="250")
    assert degraded_metric(replica) == 0
    redis_server.stop()
    gone = time.monotonic()
    await wait_for(lambda: degraded_metric(replica) == 1, timeout=6.0)
    noticed = time.monotonic() - gone
    assert await readyz_redis(replica) == "degraded"
    redis_server.start()
    back = time.monotonic()
    await wait_for(lambda: degraded_metric(replica) == 0, timeout=4.0)
    recovered = time.monotonic() - back
    assert await readyz_redis(replica) == "ok"
    print(
        f"idle replica: degraded {noticed:.2f} s after Redis went away,"
        f" ok {recovered:.2f} s after it returned"
    )
