"""Admission across a fleet on a real three-master Redis Cluster (not a timed test):
`python -m tests.bench.fleet_bench [--replicas 8] [--accounts 200] [--seconds 10]`.

Starts a three-master Cluster on free loopback ports (tests/support/engines_redis.py) and
simulates a fleet in one process: each replica is its own `Admission`, with its own cluster
client and its own lease of a fleet-wide cap, exactly as a serving replica builds it.
Workers admit calls from many accounts on the replicas in turn, hold each a moment, and
release it. Printed: admissions a second; the script calls each master served (from its
`INFO commandstats`) and the busiest master's share; redis-server CPU per admission (all
masters, from `INFO cpu`); this process's CPU per admission (the limiter's client side);
and whether any cap was exceeded: per replica (`global`), per account, and the fleet's.
None may be: the run exits non-zero if one was.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from service.errors import LimitExceeded
from service.limits.admission import Admission
from service.limits.redis_client import make_cluster_client
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits
from service.settings.redis import ACCOUNT_SLOT
from tests.limits.conftest import make_caller
from tests.support.engines_redis import RedisClusterSet

PREFIX = "fleet:"
GLOBAL, ACCOUNT = 4, 2


@dataclass
class Tally:
    admitted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    by_replica: Counter[int] = field(default_factory=Counter)
    by_account: Counter[uuid.UUID] = field(default_factory=Counter)
    fleet: int = 0
    worst_replica: int = 0
    worst_account: int = 0
    worst_fleet: int = 0


def _master_stats(cluster: RedisClusterSet) -> tuple[list[int], float]:
    calls, cpu = [], 0.0
    for node in cluster.nodes[:3]:
        with node.client() as c:
            stats = c.info("commandstats")
            calls.append(int(stats.get("cmdstat_evalsha", {}).get("calls", 0)))
            info = c.info("cpu")
            cpu += float(info["used_cpu_sys"]) + float(info["used_cpu_user"])
    return calls, cpu


async def run(cluster: RedisClusterSet, replicas: int, accounts: int, seconds: float) -> int:
    fleet_cap = replicas * GLOBAL * 3 // 4  # below the replicas' sum: the leases bind
    limits = replace(
        Limits(),
        global_concurrency=GLOBAL,
        account_concurrency=ACCOUNT,
        approval_per_minute=1_000_000,
        fleet_concurrency=fleet_cap,
        slot_wait_seconds=0.0,  # refusals counted, not waited for: the caps are the subject
    )
    fleet: list[Admission] = []
    clients = []
    for n in range(replicas):
        client = make_cluster_client(cluster.url(n % 3), timeout=1.0)
        clients.append(client)
        admission = Admission(
            limits,
            redis=client,
            key_prefix=PREFIX,
            metrics=Metrics(),
            timeout_seconds=1.0,
            key_layout=ACCOUNT_SLOT,
        )
        await admission.warm_up()
        fleet.append(admission)
    renewals = [asyncio.create_task(a.fleet.run()) for a in fleet if a.fleet is not None]
    callers = [make_caller() for _ in range(accounts)]
    tally = Tally()
    stop = time.monotonic() + seconds

    async def worker(n: int) -> None:
        i = n
        while time.monotonic() < stop:
            r, caller = i % replicas, callers[(i * 7919) % accounts]
            i += 1
            try:
                grant = await fleet[r].acquire(uuid.uuid4().hex, caller)
            except LimitExceeded as refused:
                tally.refused[refused.limit] += 1
                await asyncio.sleep(0.001)
                continue
            except Exception:
                tally.errors += 1
                continue
            tally.admitted += 1
            tally.by_replica[r] += 1
            tally.by_account[caller.account_id] += 1
            tally.fleet += 1
            tally.worst_replica = max(tally.worst_replica, tally.by_replica[r])
            tally.worst_account = max(tally.worst_account, tally.by_account[caller.account_id])
            tally.worst_fleet = max(tally.worst_fleet, tally.fleet)
            try:
                await asyncio.sleep(0.002)
            finally:
                tally.by_replica[r] -= 1
                tally.by_account[caller.account_id] -= 1
                tally.fleet -= 1
                await fleet[r].release(grant)

    calls_before, cpu_before = _master_stats(cluster)
    process_before = time.process_time()
    started = time.monotonic()
    await asyncio.gather(*(worker(n) for n in range(replicas * GLOBAL * 2)))
    elapsed = time.monotonic() - started
    process_cpu = time.process_time() - process_before
    calls_after, cpu_after = _master_stats(cluster)
    for task in renewals:
        task.cancel()
    await asyncio.gather(*renewals, return_exceptions=True)
    for admission in fleet:
        await admission.close()
    for client in clients:
        await client.aclose()

    served = [after - before for after, before in zip(calls_after, calls_before, strict=True)]
    total = sum(served) or 1
    admitted = max(tally.admitted, 1)
    exceeded = (
        tally.worst_replica > GLOBAL
        or tally.worst_account > ACCOUNT
        or tally.worst_fleet > fleet_cap
    )
    print(f"replicas {replicas} (each its own client and fleet lease), accounts {accounts}")
    print(f"admissions       {tally.admitted / elapsed:,.0f}/s over {elapsed:.1f} s")
    refusals = ", ".join(f"{k} {v}" for k, v in sorted(tally.refused.items())) or "none"
    print(f"refusals         {refusals}; errors {tally.errors}")
    shares = ", ".join(f"{100 * s / total:.0f} %" for s in served)
    print(f"script calls     {total:,} by master: {served} ({shares})")
    print(f"busiest master   {100 * max(served) / total:.0f} % of the script calls")
    redis_us = (cpu_after - cpu_before) / admitted * 1e6
    print(f"redis-server CPU {redis_us:.1f} us an admission (all masters, acquire + release)")
    print(f"client CPU       {process_cpu / admitted * 1e6:.1f} us an admission (this process)")
    print(
        f"most at once     per replica {tally.worst_replica} (cap {GLOBAL}), per account"
        f" {tally.worst_account} (cap {ACCOUNT}), fleet {tally.worst_fleet} (cap {fleet_cap})"
    )
    print(f"caps exceeded    {'YES' if exceeded else 'none'}")
    return 1 if exceeded or tally.errors else 0


def report(seconds: float) -> str:
    """The section of `make bench` (tests/bench/__main__.py): this run's printout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["--seconds", str(seconds)])
    head = "\n## Fleet admission on a 3-master Redis Cluster (tests/bench/fleet_bench.py)\n\n"
    failed = "" if status == 0 else "\nFAILED: a cap was exceeded or a call failed\n"
    return head + "```\n" + out.getvalue() + "```\n" + failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.fleet_bench")
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--accounts", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        cluster = RedisClusterSet(Path(folder) / "cluster")
        try:
            cluster.start()
            return asyncio.run(run(cluster, args.replicas, args.accounts, args.seconds))
        finally:
            cluster.stop()


if __name__ == "__main__":
    sys.exit(main())
