"""A circuit breaker in front of Redis: stop calling a dependency that keeps failing.

Closed: every call goes through; `failure_threshold` failures in a row open it. Open: no
call goes through for `cooldown_seconds`; then it half-opens and lets exactly one trial
call through. The trial's success closes it; its failure opens it for another cooldown.
The breaker only counts: the admission decides what a failure is and what to do meanwhile.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable


class State(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    def __init__(
        self,
        *,
        failure_threshold: int = 3,
        cooldown_seconds: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self._clock = clock
        self._state = State.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False

    @property
    def state(self) -> State:
        return self._state

    @property
    def failures(self) -> int:
        """Failures in a row since the last success."""
        return self._failures

    def seconds_until_trial(self) -> float:
        """While open: how long until a trial call may go through (0 otherwise)."""
        if self._state is not State.OPEN:
            return 0.0
        return max(0.0, self.cooldown_seconds - (self._clock() - self._opened_at))

    def allow(self) -> bool:
        """May a call go through now? In half-open, only one trial at a time does."""
        if self._state is State.CLOSED:
            return True
        if self._state is State.OPEN:
            if self._clock() - self._opened_at < self.cooldown_seconds:
                return False
            self._state = State.HALF_OPEN
            self._trial_in_flight = False
        if self._trial_in_flight:
            return False
        self._trial_in_flight = True
        return True

    def record_success(self) -> None:
        self._failures = 0
        self._trial_in_flight = False
        self._state = State.CLOSED

    def abandon(self) -> None:
        """A call that went through ended without an answer either way (cancelled)."""
        self._trial_in_flight = False

    def record_failure(self) -> None:
        self._trial_in_flight = False
        if self._state is State.HALF_OPEN:
            self._open()
            return
        self._failures += 1
        if self._state is State.CLOSED and self._failures >= self.failure_threshold:
            self._open()

    def _open(self) -> None:
        self._state = State.OPEN
        self._opened_at = self._clock()
