"""The replica's own slots (the global cap) and the queue of requests waiting for an account
slot, alone: arrival order, bounds, time limits, slots handed over and never lost."""

from __future__ import annotations

import asyncio
import time
from uuid import uuid4

import pytest

from service.limits.replica_slots import ReplicaSlots
from service.limits.slot_waits import SlotWaits

pytestmark = pytest.mark.unit


async def test_a_freed_slot_goes_to_the_oldest_waiter_and_never_to_a_newcomer() -> None:
    slots = ReplicaSlots(cap=1, max_waiters=10)
    assert slots.take()
    loop = asyncio.get_running_loop()
    order: list[int] = []

    async def waiter(n: int) -> None:
        assert await slots.wait(loop.time() + 1.0)
        order.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(3)]
    await asyncio.sleep(0.01)
    assert slots.waiting == 3
    for _ in range(3):
        assert not slots.take()  # a newcomer does not overtake the waiters
        slots.give_back()  # handed to the oldest waiter: still held
        await asyncio.sleep(0.01)
        assert slots.held == 1
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2]
    slots.give_back()
    assert slots.held == 0 and slots.take()


async def test_a_wait_ends_at_its_time_and_past_the_bound_nobody_queues() -> None:
    slots = ReplicaSlots(cap=1, max_waiters=1)
    assert slots.take()
    loop = asyncio.get_running_loop()
    started = loop.time()
    first = asyncio.create_task(slots.wait(loop.time() + 0.05))
    await asyncio.sleep(0)
    assert not await slots.wait(loop.time() + 1.0)  # the bound: refused at once
    assert loop.time() - started < 0.04
    assert not await first  # nobody freed a slot in time
    assert slots.waiting == 0 and slots.held == 1


async def test_a_slot_handed_to_a_cancelled_waiter_is_passed_on() -> None:
    slots = ReplicaSlots(cap=1, max_waiters=10)
    assert slots.take()
    loop = asyncio.get_running_loop()
    doomed = asyncio.create_task(slots.wait(loop.time() + 1.0))
    survivor = asyncio.create_task(slots.wait(loop.time() + 1.0))
    await asyncio.sleep(0)
    slots.give_back()  # handed to `doomed` ...
    doomed.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert await survivor
    assert slots.held == 1


async def test_a_smaller_lease_admits_nothing_until_held_slots_fall_below_it() -> None:
    slots = ReplicaSlots(cap=4, max_waiters=10)
    for _ in range(4):
        assert slots.take()
    slots.resize(2)  # the fleet lease shrank
    slots.give_back()
    slots.give_back()
    assert slots.held == 2 and not slots.take()
    slots.give_back()
    assert slots.take()
    slots.resize(10)
    assert slots.capacity == 4  # never above the replica's own cap


async def test_slots_end_with_the_lease_that_granted_them_even_for_waiters() -> None:
    slots = ReplicaSlots(cap=4, max_waiters=10)
    slots.resize(2, until=time.monotonic() + 0.2)  # a lease ending in 0.2 s
    assert slots.take() and slots.take()
    loop = asyncio.get_running_loop()
    waiter = asyncio.create_task(slots.wait(loop.time() + 1.0))
    await asyncio.sleep(0.3)  # the lease ended, and nobody has noticed it yet
    assert slots.capacity == 0
    slots.give_back()  # a freed slot is not handed over past the lease's end
    assert slots.held == 1 and not waiter.done() and not slots.take()
    slots.resize(2, until=time.monotonic() + 5)  # renewed: the waiter comes first
    assert await waiter and slots.held == 2


async def test_a_freed_slot_goes_to_the_waiting_account_holding_the_fewest() -> None:
    slots = ReplicaSlots(cap=3, max_waiters=10)
    busy, other, idle = uuid4(), uuid4(), uuid4()
    assert slots.take(busy) and slots.take(busy) and slots.take(other)
    loop = asyncio.get_running_loop()
    order: list[str] = []

    async def waiter(name: str, account: object) -> None:
        assert await slots.wait(loop.time() + 1.0, account)  # type: ignore[arg-type]
        order.append(name)

    names = [("busy1", busy), ("busy2", busy), ("other1", other), ("idle1", idle)]
    tasks = []
    for name, account in names:  # arriving in this order
        tasks.append(asyncio.create_task(waiter(name, account)))
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)
    assert slots.next_account() == idle  # holds none
    for holder in (busy, busy, other, other):
        slots.give_back(holder)
        await asyncio.sleep(0.01)
    # Each freed slot to the waiting account holding the fewest, not the oldest waiter:
    # idle (0, against 1 and 1), busy (down to 0), other (down to 0), busy's second.
    assert order == ["idle1", "busy1", "other1", "busy2"]
    await asyncio.gather(*tasks)


async def test_among_accounts_holding_as_many_the_oldest_waiter_goes_first() -> None:
    slots = ReplicaSlots(cap=3, max_waiters=10)
    first, second, third = uuid4(), uuid4(), uuid4()
    assert slots.take(first) and slots.take(second) and slots.take(third)
    loop = asyncio.get_running_loop()
    late = asyncio.create_task(slots.wait(loop.time() + 1.0, second))
    await asyncio.sleep(0)
    early = asyncio.create_task(slots.wait(loop.time() + 1.0, first))
    await asyncio.sleep(0)
    assert slots.next_account() == second  # both hold 1: its waiter came first
    slots.give_back(third)
    assert await late and not early.done()
    slots.give_back(second)
    assert await early
    assert slots.held == 3 and slots.waiting == 0


async def test_within_an_account_waiters_go_in_arrival_order_and_are_bounded() -> None:
    slots = ReplicaSlots(cap=1, max_waiters=10, max_per_account=2)
    account = uuid4()
    assert slots.take(account)
    loop = asyncio.get_running_loop()
    order: list[int] = []

    async def waiter(n: int) -> None:
        assert await slots.wait(loop.time() + 1.0, account)
        order.append(n)

    tasks = [asyncio.create_task(waiter(n)) for n in range(2)]
    await asyncio.sleep(0.01)
    assert not await slots.wait(loop.time() + 1.0, account)  # its account's bound
    assert slots.waiting == 2 and slots.holding(account) == 1
    for _ in range(3):
        slots.give_back(account)
        await asyncio.sleep(0.01)
    await asyncio.gather(*tasks)
    assert order == [0, 1] and slots.held == 0 and slots.holding(account) == 0


async def test_account_waits_go_in_arrival_order_within_their_bounds() -> None:
    waits = SlotWaits(max_waiters=3, max_per_account=2)
    busy, other = uuid4(), uuid4()
    loop = asyncio.get_running_loop()
    first, second = waits.join(busy), waits.join(busy)
    assert first is not None and second is not None
    assert waits.join(busy) is None  # the account's bound
    third = waits.join(other)
    assert third is not None
    assert waits.join(uuid4()) is None  # the replica's bound
    assert waits.ahead(busy) and waits.ahead(other)
    assert await first.next_try(loop.time() + 0.5)  # the head tries at once
    behind = asyncio.create_task(second.next_try(loop.time() + 0.5))
    await asyncio.sleep(0.02)
    assert not behind.done()  # it waits for the head
    waits.leave(first)
    assert await behind  # its turn
    waits.leave(second)
    waits.leave(third)
    assert not waits.ahead(busy) and waits.waiting == 0


async def test_the_head_retries_at_once_when_this_replica_frees_a_slot() -> None:
    waits = SlotWaits(max_waiters=8, max_per_account=8)
    account = uuid4()
    loop = asyncio.get_running_loop()
    head = waits.join(account)
    assert head is not None and await head.next_try(loop.time() + 1.0)
    for _ in range(4):  # back off towards the longest poll
        assert await head.next_try(loop.time() + 1.0)
    started = loop.time()
    retry = asyncio.create_task(head.next_try(loop.time() + 1.0))
    await asyncio.sleep(0.002)
    waits.freed(account)
    assert await retry
    assert loop.time() - started < 0.03
    ended = loop.time() + 0.02
    while await head.next_try(ended):
        pass
    assert loop.time() >= ended  # False only once the time is up
