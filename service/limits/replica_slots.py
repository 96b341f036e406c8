"""The global cap: this replica's own concurrency slots, counted in its memory.

`global` measures a replica's capacity, so it is per replica (docs/decisions/limits.md,
"Admission that grows with the fleet"): each replica admits at most
ELOVA_LIMIT_GLOBAL_CONCURRENCY requests at once, with no Redis call. With a fleet-wide cap
(fleet.py) the slots this replica may use are also bounded by the block it has leased from
the fleet (`capacity`), which may shrink and grow while it serves. `ReplicaSlots` hands
them out at once (`take`) or through a fair queue across accounts (`wait`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from itertools import count
from uuid import UUID

_turns = count()  # arrival order across every replica's queues (only its order matters)


class _Turn:
    __slots__ = ("future", "order")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.order = next(_turns)


class ReplicaSlots:
    """This replica's slots: a fleet of N replicas admits N times the cap.

    A request takes a slot at once when one is free and nobody waits for one (`take`), or
    waits for one (`wait`), up to a time it is given: a freed slot is handed directly to a
    waiter, so a newcomer never overtakes one. The waiter is chosen fairly across accounts:
    the waiting account holding the fewest slots, the one that has waited longest among
    equals; within an account, arrival order (docs/limits.md, "The wait for a slot"). Past
    `max_waiters` waiting requests, or `max_per_account` of its account, a newcomer is not
    queued at all. `account` None (a caller that names none) is one more account.
    """

    def __init__(self, cap: int, max_waiters: int, max_per_account: int | None = None) -> None:
        self.cap = cap  # ELOVA_LIMIT_GLOBAL_CONCURRENCY
        self._capacity = cap  # what may be held: the cap, or less under a fleet lease
        self._until: float | None = None  # monotonic time `_capacity` ends (a lease's end)
        self.max_waiters = max_waiters  # ELOVA_LIMIT_WAITERS
        self.max_per_account = max_waiters if max_per_account is None else max_per_account
        self.held = 0
        self.waiting = 0
        self._held_by: dict[UUID | None, int] = {}
        self._queues: dict[UUID | None, deque[_Turn]] = {}

    @property
    def capacity(self) -> int:
        """What may be held now: none past the end of the lease that granted it (judged
        here, on every take and hand-over, not when someone next notices the lease)."""
        if self._until is not None and time.monotonic() >= self._until:
            return 0
        return self._capacity

    def holding(self, account: UUID | None) -> int:
        """The slots this account holds now."""
        return self._held_by.get(account, 0)

    def take(self, account: UUID | None = None) -> bool:
        """A slot now, if one is free and nobody waits for one."""
        if self.held < self.capacity and not self.waiting:
            self.held += 1
            held_by = self._held_by
            held_by[account] = held_by.get(account, 0) + 1
            return True
        return False

    async def wait(self, until: float, account: UUID | None = None) -> bool:
        """A slot, waiting for it in the fair queue until loop time `until`; False when the
        time ran out first, or too many requests wait already (nothing is held then)."""
        if self.take(account):
            return True
        loop = asyncio.get_running_loop()
        queue = self._queues.get(account)
        if (
            self.waiting >= self.max_waiters
            or (queue is not None and len(queue) >= self.max_per_account)
            or loop.time() >= until
        ):
            return False
        turn = _Turn(loop.create_future())
        if queue is None:
            queue = self._queues[account] = deque()
        queue.append(turn)
        self.waiting += 1
        try:
            async with asyncio.timeout_at(until):
                await turn.future
            return True  # handed a slot: `held` already counts it
        except TimeoutError:
            if _handed(turn.future):  # handed a slot just as the time ran out: it is ours
                return True
            self._drop(account, turn)
            return False
        except asyncio.CancelledError:
            if _handed(turn.future):  # handed a slot as this request was cancelled: pass it on
                self.give_back(account)
            else:
                self._drop(account, turn)
            raise

    def give_back(self, account: UUID | None = None) -> None:
        """Free the account's slot: to the fairest waiter if any (it stays held), else to
        the pool."""
        self._unhold(account)
        if self.waiting and self.held < self.capacity:
            self._hand_over()

    def resize(self, capacity: int, until: float | None = None) -> None:
        """The slots this replica may hold now (a fleet lease changed): never above the
        cap, and none from monotonic time `until` on (None: no end). Slots already held
        stay held; newly allowed ones go to waiters first."""
        self._capacity = max(0, min(self.cap, capacity))
        self._until = until
        while self.held < self.capacity and self._hand_over():
            pass

    def next_account(self) -> UUID | None:
        """The account the next freed slot goes to (the queue is not empty): the fewest
        slots held, then the oldest waiter."""
        return min(
            self._queues,
            key=lambda account: (self.holding(account), self._queues[account][0].order),
        )

    def _hand_over(self) -> bool:
        """One slot to the fairest waiter; False when nobody waits."""
        while self.waiting:
            account = self.next_account()
            queue = self._queues[account]
            turn = queue.popleft()
            self.waiting -= 1
            if not queue:
                del self._queues[account]
            if not turn.future.done():
                self._hold(account)
                turn.future.set_result(None)
                return True
        return False

    def _hold(self, account: UUID | None) -> None:
        self.held += 1
        self._held_by[account] = self._held_by.get(account, 0) + 1

    def _unhold(self, account: UUID | None) -> None:
        self.held -= 1
        left = self._held_by.get(account, 0) - 1
        if left > 0:
            self._held_by[account] = left
        else:
            self._held_by.pop(account, None)

    def _drop(self, account: UUID | None, turn: _Turn) -> None:
        queue = self._queues.get(account)
        if queue is None:
            return
        with contextlib.suppress(ValueError):
            queue.remove(turn)
            self.waiting -= 1
        if not queue:
            del self._queues[account]


def _handed(turn: asyncio.Future[None]) -> bool:
    return turn.done() and not turn.cancelled()
