"""A request's waits (for a slot, for its approval's shared read): while one lasts the
request is a waiter, not in flight, for load shedding (service/server/overload/), and its
time is left out of the latency the in-flight limit sees. Load shedding sets the running
request's `WaitClock`; what makes a request wait marks the wait (`waiting`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class Waiters:
    """How many requests of this replica wait now (a slot, a shared read) (load shedding counts them
    apart from the requests in flight, service/server/overload/state.py)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


class WaitClock:
    """One request's waits for a slot: counted in its replica's `Waiters` while they last,
    their seconds summed (the in-flight limit's latency leaves them out)."""

    __slots__ = ("seconds", "waiters")

    def __init__(self, waiters: Waiters) -> None:
        self.waiters = waiters
        self.seconds = 0.0


# The running request's clock, set by load shedding's in-flight count (shedding.py).
WAIT_CLOCK: ContextVar[WaitClock | None] = ContextVar("elova_wait_clock", default=None)


@contextmanager
def waiting() -> Iterator[None]:
    """The running request waits for a slot meanwhile (a waiter, not in flight)."""
    clock = WAIT_CLOCK.get()
    if clock is None:
        yield
        return
    clock.waiters.count += 1
    since = time.monotonic()
    try:
        yield
    finally:
        clock.waiters.count -= 1
        clock.seconds += time.monotonic() - since
