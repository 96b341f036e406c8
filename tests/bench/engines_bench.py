"""Benchmark of the admission limiter on each Redis engine (not a timed test):
`python -m tests.bench.engines_bench`.

Starts, in a temporary folder on free loopback ports: a private redis-server (standalone),
a three-master Redis Cluster and a Sentinel set (tests/support/engines_redis.py), all with
a password, and prints for each the admissions a second of one Python process (acquire +
release and acquire only, 50 concurrent tasks; caps so high that every admission is
granted), the client CPU time an admission costs (acquire + release; less noisy than the
rate on a shared machine) and the sequential acquire + release latency. The cluster client
is seeded with one node, as an operator's URL is, and routes each account to its master.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from pathlib import Path

from service.limits.admission import Admission
from service.limits.redis_client import (
    RedisClient,
    SentinelClient,
    make_client,
    make_cluster_client,
)
from service.observability.metrics.app_metrics import Metrics
from tests.bench.limits_bench import (
    DURATION,
    LIMITS,
    admissions_per_second,
    latencies,
    summary,
)
from tests.limits.conftest import make_caller
from tests.support.engines_redis import Node, RedisClusterSet, RedisSentinelSet
from tests.support.server import free_port

PASSWORD = "bench-pw"
PREFIX = "bench:"


async def measure(name: str, client: RedisClient) -> None:
    admission = Admission(LIMITS, redis=client, key_prefix=PREFIX, metrics=Metrics())
    await admission.warm_up()
    caller = make_caller()

    async def step() -> None:
        await admission.release(await admission.acquire(uuid.uuid4().hex, caller))

    try:
        cpu = time.process_time()
        with_release = await admissions_per_second(admission, release=True)
        cpu_us = (time.process_time() - cpu) / (with_release * DURATION) * 1e6
        acquire_only = await admissions_per_second(admission, release=False)
        p50, p99 = summary(await latencies(step, n=1000))
        assert not admission.degraded, f"{name}: the limiter degraded during the run"
    finally:
        await admission.close()
    print(
        f"{name:<11} acquire+release {with_release:>6,.0f}/s ({cpu_us:.0f} us CPU each)"
        f"   acquire only {acquire_only:>6,.0f}/s   latency p50 {p50:>4.0f} us, p99 {p99:>5.0f} us"
    )


async def bench(standalone: Node, cluster: RedisClusterSet, sentinels: RedisSentinelSet) -> None:
    client = make_client(f"redis://:{PASSWORD}@127.0.0.1:{standalone.port}/0")
    await measure("standalone", client)
    await client.aclose()

    # Seeded with any one node: it discovers the rest, and each account's master serves it.
    cluster_client = make_cluster_client(cluster.url(1))
    await measure("cluster", cluster_client)
    await cluster_client.aclose()

    sentinel = SentinelClient(
        tuple(("127.0.0.1", s.port) for s in sentinels.sentinels), sentinels.name, sentinels.url()
    )
    await measure("sentinel", sentinel.master)
    await sentinel.aclose()


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        standalone = Node(free_port(), base / "standalone", ["--requirepass", PASSWORD], PASSWORD)
        cluster = RedisClusterSet(base / "cluster", password=PASSWORD)
        sentinels = RedisSentinelSet(base / "sentinel", password=PASSWORD)
        try:
            standalone.start()
            cluster.start()
            sentinels.start()
            asyncio.run(bench(standalone, cluster, sentinels))
        finally:
            standalone.stop()
            cluster.stop()
            sentinels.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
