"""Traffic for the engine tests: many tasks taking and releasing admissions on several
replicas' limiters at once, counting what a user would check: how many requests held a
shared slot at the same moment (never above the cap), how many were admitted, refused,
answered by per-process limits, or failed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from uuid import UUID, uuid4

from service.app_keys import ADMISSION, METRICS
from service.errors import LimitExceeded
from service.limits.admission import Admission
from tests.limits.conftest import ENGINE_CAP, AppClient, make_caller
from tests.support.engines_redis import RedisClusterSet


@dataclass
class Tally:
    shared: int = 0  # admitted by the shared (Redis) limits
    local: int = 0  # admitted by per-process limits (Redis failing)
    refused: int = 0  # 429 by a limit
    unanswered: int = 0  # 429 because Redis did not answer (a blip)
    errors: list[BaseException] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0  # shared grants held at once, across all replicas
    first_shared_after: float | None = None  # monotonic time of the first shared admission
    mark: float = 0.0  # … asked for after this instant (set by the test: the master died)

    def mark_now(self) -> None:
        self.mark = time.monotonic()
        self.first_shared_after = None


async def run_traffic(
    admissions: Sequence[Admission],
    *,
    seconds: float,
    workers: int = 16,
    hold: float = 0.003,
    tally: Tally | None = None,
    account: UUID | None = None,
) -> Tally:
    """`workers` tasks for `seconds`, each admitting on the replicas in turn for one account
    (its cap is what they contend for), holding the grant `hold` seconds, then releasing
    it."""
    tally = tally or Tally()
    account = account or uuid4()
    stop = time.monotonic() + seconds

    async def worker(n: int) -> None:
        i = n
        while time.monotonic() < stop:
            admission = admissions[i % len(admissions)]
            i += 1
            caller = make_caller(account_id=account)
            asked = time.monotonic()
            try:
                grant = await admission.acquire(f"t-{n}-{i}-{uuid4().hex[:6]}", caller)
            except LimitExceeded as refused:
                if "did not answer" in str(refused):
                    tally.unanswered += 1
                else:
                    tally.refused += 1
                await asyncio.sleep(hold)
                continue
            except Exception as err:
                tally.errors.append(err)
                await asyncio.sleep(hold)
                continue
            if grant.shared:
                tally.shared += 1
                tally.in_flight += 1
                tally.max_in_flight = max(tally.max_in_flight, tally.in_flight)
                if tally.first_shared_after is None and asked > tally.mark > 0:
                    tally.first_shared_after = time.monotonic()
            else:
                tally.local += 1
            try:
                await asyncio.sleep(hold)
            finally:
                if grant.shared:
                    tally.in_flight -= 1
                await admission.release(grant)

    await asyncio.gather(*(worker(n) for n in range(workers)))
    return tally


def account_key(prefix: str, account: UUID) -> str:
    """The account's lease set: its hash slot is where all its admissions go."""
    return f"{prefix}limits:{{{account}}}:account"


def account_owned_by(cluster: RedisClusterSet, prefix: str, master: int) -> UUID:
    """An account whose admissions the cluster's `master` serves."""
    while True:
        account = uuid4()
        if cluster.owner_of(account_key(prefix, account)) == master:
            return account


def admission(client: AppClient) -> Admission:
    return client.app[ADMISSION]


def degraded_metric(client: AppClient) -> float | None:
    """elova_mcp_limiter_degraded, as the replica's /metrics would show it."""
    value: float | None = client.app[METRICS].registry.get_sample_value(
        "elova_mcp_limiter_degraded"
    )
    return value


async def readyz_redis(client: AppClient) -> str:
    resp = await client.get("/readyz")
    assert resp.status == 200  # Redis never fails readiness
    state: str = (await resp.json())["redis"]
    return state


def assert_shared_and_clean(tally: Tally, cap: int = ENGINE_CAP) -> None:
    """Every admission shared, none failed or went unanswered, the cap never exceeded
    across the replicas, and really contended (some refusals)."""
    assert tally.errors == []
    assert tally.unanswered == 0
    assert tally.local == 0
    assert tally.shared > 50
    assert tally.max_in_flight <= cap, tally
    assert tally.refused > 0
