"""The short wait for an account slot: requests over the account cap queue in this replica,
in arrival order, and the oldest retries its admission when a slot may have freed.

A request refused `account` waits up to ELOVA_LIMIT_SLOT_WAIT_MS before its 429
(docs/limits.md), holding nothing while it waits: no lease, no token, no replica slot.
`SlotWaits` keeps the queues, `SlotWait` one request's place. Why a wait, and why these
choices: docs/decisions/limits.md, "Admission that grows with the fleet", The wait for a
slot. While it waits (here or for a replica slot) a request is a waiter, not in flight, for
load shedding (service/edge/waiters.py).
"""

from __future__ import annotations

import asyncio
from collections import deque
from uuid import UUID

# The head's retry schedule when no local release wakes it: slots freed by other replicas.
_FIRST_POLL = 0.005
_LONGEST_POLL = 0.05


class SlotWait:
    """One request's place in its account's queue, from `join` to `SlotWaits.leave`."""

    __slots__ = ("account_id", "freed", "poll", "turn")

    def __init__(self, account_id: UUID) -> None:
        self.account_id = account_id
        self.turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.freed = asyncio.Event()
        self.poll = _FIRST_POLL

    async def next_try(self, until: float) -> bool:
        """Wait until this request should try again (at the head of its queue, after a slot
        of the account may have freed); False when loop time `until` comes first."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout_at(until):
                if not self.turn.done():
                    await self.turn  # behind older waiters: their turn first
                    return True  # the head's first try is at once
                delay = min(self.poll, max(0.0, until - loop.time()))
                self.poll = min(self.poll * 2, _LONGEST_POLL)
                try:
                    async with asyncio.timeout(delay):
                        await self.freed.wait()
                    self.poll = _FIRST_POLL  # a local release: the next one may be soon
                except TimeoutError:
                    if loop.time() >= until:
                        raise
                self.freed.clear()
                return True
        except TimeoutError:
            return False


class SlotWaits:
    """One queue per account, oldest first.

    Only the oldest waiter of an account (its head) retries, so a later request never
    overtakes an earlier one of the same replica, and a newcomer joins behind the waiters
    instead of trying first. The head retries when this replica frees a slot of the account
    (`freed`: the release is already on its way to Redis, ahead of the retry) and otherwise
    every few milliseconds, backing off to `_LONGEST_POLL`, for slots freed by other
    replicas. At most `max_waiters` requests of the replica and `max_per_account` of one
    account wait; past either bound a request is refused at once, so a flood of waiters
    neither pins the replica nor starves other accounts.
    """

    def __init__(self, max_waiters: int, max_per_account: int) -> None:
        self.max_waiters = max_waiters
        self.max_per_account = max_per_account
        self._queues: dict[UUID, deque[SlotWait]] = {}
        self.waiting = 0

    def ahead(self, account_id: UUID) -> bool:
        """Whether requests of this account wait already (a newcomer queues behind them)."""
        return account_id in self._queues

    def join(self, account_id: UUID) -> SlotWait | None:
        """A place at the back of the account's queue; None past a bound (refuse now)."""
        queue = self._queues.get(account_id)
        if self.waiting >= self.max_waiters or (
            queue is not None and len(queue) >= self.max_per_account
        ):
            return None
        wait = SlotWait(account_id)
        if queue is None:
            queue = self._queues[account_id] = deque()
            wait.turn.set_result(None)  # alone: at the head
        queue.append(wait)
        self.waiting += 1
        return wait

    def leave(self, wait: SlotWait) -> None:
        """The request stops waiting (admitted, refused, cancelled): the next one's turn."""
        queue = self._queues.get(wait.account_id)
        if queue is None or wait not in queue:
            return
        head = queue[0] is wait
        queue.remove(wait)
        self.waiting -= 1
        if not queue:
            del self._queues[wait.account_id]
        elif head and not queue[0].turn.done():
            queue[0].turn.set_result(None)

    def freed(self, account_id: UUID) -> None:
        """This replica released a slot of the account: its head retries now."""
        queue = self._queues.get(account_id)
        if queue:
            queue[0].freed.set()
