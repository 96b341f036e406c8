"""The optional fleet-wide cap: leased blocks of the fleet's concurrency, against the
machine's Redis. The blocks recorded never add up to more than the cap under any
interleaving of renewals, releases and replicas that stop renewing; a replica admits no
more than its block; a stopped replica's block returns at once, a killed one's when its
record ends."""

from __future__ import annotations

import asyncio
import random

import pytest
import redis.asyncio as aioredis

from service.errors import LimitExceeded
from service.limits.admission import Admission, Grant
from service.limits.pipeline import Script, ScriptPipeline
from tests.limits.conftest import MakeAdmission, make_caller

pytestmark = pytest.mark.alone


async def test_the_recorded_blocks_never_exceed_the_cap_under_any_interleaving(
    redis_client: aioredis.Redis, key_prefix: str
) -> None:
    pipe = ScriptPipeline(redis_client)
    script = Script("fleet.lua")
    base = f"{key_prefix}limits:{{fleet}}:"
    keys = [f"{base}leases", f"{base}blocks", f"{base}wants"]
    cap, rng = 10, random.Random(7)
    granted: dict[str, int] = {}  # what each replica may admit now
    held: dict[str, int] = {}  # what each replica holds (never above what it was granted)
    replicas = [f"r{n}" for n in range(8)]
    for step in range(400):
        rid = rng.choice(replicas)
        if rng.random() < 0.1:
            await pipe.call(script, keys, [rid, 0, 0, cap, 60_000, 1])  # stops
            granted.pop(rid, None)
            held.pop(rid, None)
        else:
            want = rng.choice((2, 4, 6))
            now_held = held.get(rid, 0)
            grant, _ = await pipe.call(script, keys, [rid, want, now_held, cap, 60_000, 0])
            granted[rid] = int(grant)
            # Some of its requests end; new ones are admitted up to the grant.
            still = now_held - rng.randint(0, now_held)
            held[rid] = still + rng.randint(0, max(0, int(grant) - still))
        blocks = {
            (k.decode() if isinstance(k, bytes) else k): int(v)
            for k, v in (await redis_client.hgetall(keys[1])).items()
        }
        assert sum(blocks.values()) <= cap, (step, blocks)
        for replica, holding in held.items():
            assert holding <= blocks.get(replica, 0), (step, replica, holding, blocks)
    await pipe.close()


def _fleet_admission(make: MakeAdmission) -> Admission:
    return make(
        fleet_concurrency=5,
        slot_wait_seconds=0,
        account_concurrency=100,
        request_deadline_seconds=0.3,
        lease_grace_seconds=0,
    )


async def _admit_many(replicas: list[Admission], n: int) -> list[Grant]:
    async def one(i: int) -> Grant | None:
        try:
            return await replicas[i % len(replicas)].acquire(f"f-{i}", make_caller())
        except LimitExceeded as refused:
            assert refused.limit == "global"
            return None

    results = await asyncio.gather(*(one(i) for i in range(n)))
    return [g for g in results if g is not None]


async def _release(replicas: list[Admission], grants: list[Grant]) -> None:
    for grant in grants:
        for replica in replicas:
            await replica.release(grant)  # idempotent, and only its own replica held it


async def test_the_fleet_holds_at_most_its_cap_and_splits_it_fairly(
    make_admission: MakeAdmission,
) -> None:
    one, two = _fleet_admission(make_admission), _fleet_admission(make_admission)
    for replica in (one, two):
        await replica.warm_up()
    # Each asks for its own cap (4); the first alone was granted 4, the second what is left.
    assert one.slots.capacity + two.slots.capacity == 5
    grants = await _admit_many([one, two], 20)
    assert len(grants) == 5
    for _ in range(2):  # renewals converge on the fair split, never above the cap meanwhile
        for replica in (one, two):
            assert replica.fleet is not None
            await replica.fleet.renew()
            assert one.slots.capacity + two.slots.capacity <= 5
    await _release([one], [g for g in grants if g.request_id.endswith(("0", "2", "4", "6", "8"))])
    await _release([two], grants)
    await _release([one], grants)
    for replica in (one, two):
        assert replica.fleet is not None
        await replica.fleet.renew()
    assert sorted((one.slots.capacity, two.slots.capacity)) == [2, 3]
    assert len(await _admit_many([one, two], 20)) == 5


async def test_a_stopped_replica_gives_its_block_back_at_once_a_killed_one_later(
    make_admission: MakeAdmission,
) -> None:
    one, two, three = (_fleet_admission(make_admission) for _ in range(3))
    for replica in (one, two, three):
        await replica.warm_up()
        assert replica.fleet is not None
    assert one.fleet and two.fleet and three.fleet
    await one.fleet.renew()
    await two.fleet.renew()
    await three.fleet.renew()
    assert one.slots.capacity + two.slots.capacity + three.slots.capacity <= 5
    await one.close()  # stops: its block returns now
    await two.fleet.renew()
    await three.fleet.renew()
    await two.fleet.renew()
    assert two.slots.capacity + three.slots.capacity == 5
    # `three` is killed: it never renews again. Its record ends after the lease (3 s) plus
    # the request deadline and grace (0.3 s); until then `two` gets only what is free.
    await asyncio.sleep(3.5)
    await two.fleet.renew()
    assert two.slots.capacity == 4  # its own cap: the rest of the fleet's is free
