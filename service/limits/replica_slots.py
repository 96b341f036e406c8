"""The global cap: this replica's own concurrency slots, counted in its memory.

`global` measures a replica's capacity, so it is per replica (docs/decisions/limits.md,
"Admission that grows with the fleet"): each replica admits at most
ELOVA_LIMIT_GLOBAL_CONCURRENCY requests at once, with no Redis call. With a fleet-wide cap
(fleet.py) the slots this replica may use are also bounded by the block it has leased from
the fleet (`capacity`), which may shrink and grow while it serves. `ReplicaSlots` hands
them out at once (`take`) or in arrival order (`wait`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque


class ReplicaSlots:
    """This replica's slots: a fleet of N replicas admits N times the cap.

    A request takes a slot at once when one is free and nobody waits for one (`take`), or
    waits in arrival order (`wait`), up to a time it is given: a freed slot goes to the
    oldest waiter directly, so a newcomer never overtakes a waiter. Past `max_waiters`
    waiting requests a newcomer is not queued at all.
    """

    def __init__(self, cap: int, max_waiters: int) -> None:
        self.cap = cap  # ELOVA_LIMIT_GLOBAL_CONCURRENCY
        self._capacity = cap  # what may be held: the cap, or less under a fleet lease
        self._until: float | None = None  # monotonic time `_capacity` ends (a lease's end)
        self.max_waiters = max_waiters
        self.held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def capacity(self) -> int:
        """What may be held now: none past the end of the lease that granted it (judged
        here, on every take and hand-over, not when someone next notices the lease)."""
        if self._until is not None and time.monotonic() >= self._until:
            return 0
        return self._capacity

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def take(self) -> bool:
        """A slot now, if one is free and nobody waits for one."""
        if self.held < self.capacity and not self._waiters:
            self.held += 1
            return True
        return False

    async def wait(self, until: float) -> bool:
        """A slot, waiting for it in arrival order until loop time `until`; False when the
        time ran out first, or too many requests wait already (nothing is held then)."""
        if self.take():
            return True
        loop = asyncio.get_running_loop()
        if len(self._waiters) >= self.max_waiters or loop.time() >= until:
            return False
        turn: asyncio.Future[None] = loop.create_future()
        self._waiters.append(turn)
        try:
            async with asyncio.timeout_at(until):
                await turn
            return True  # `give_back` handed its slot over: `held` already counts it
        except TimeoutError:
            if _handed(turn):  # handed a slot just as the time ran out: it is ours
                return True
            self._drop(turn)
            return False
        except asyncio.CancelledError:
            if _handed(turn):  # handed a slot as this request was cancelled: pass it on
                self.give_back()
            else:
                self._drop(turn)
            raise

    def give_back(self) -> None:
        """Free a slot: to the oldest waiter if any (it stays held), else to the pool."""
        while self._waiters and self.held <= self.capacity:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.held -= 1

    def resize(self, capacity: int, until: float | None = None) -> None:
        """The slots this replica may hold now (a fleet lease changed): never above the
        cap, and none from monotonic time `until` on (None: no end). Slots already held
        stay held; newly allowed ones go to waiters first."""
        self._capacity = max(0, min(self.cap, capacity))
        self._until = until
        while self._waiters and self.held < self.capacity:
            turn = self._waiters.popleft()
            if not turn.done():
                self.held += 1
                turn.set_result(None)

    def _drop(self, turn: asyncio.Future[None]) -> None:
        with contextlib.suppress(ValueError):
            self._waiters.remove(turn)


def _handed(turn: asyncio.Future[None]) -> bool:
    return turn.done() and not turn.cancelled()
