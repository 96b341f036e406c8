"""Whether this replica is overloaded: the smoothed event-loop lag, and the requests in
flight against the in-flight limit (fixed or adaptive, service/server/overload/inflight_limit.py).

shedding.py feeds an `Overload` (its lag probe, its in-flight count, the latency of each
admitted request) and refuses new requests while `refusal()` names a reason. Lag
samples are clipped at `CLIP` thresholds and smoothed (`SMOOTHING`); shedding for lag starts
at the threshold and stops under `STOP_FRACTION` of it (docs/decisions/floods.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from service.edge.waiters import Waiters
from service.server.overload.inflight_limit import (
    MIN_LIMIT,
    FixedLimit,
    GradientLimit,
    InflightLimit,
)
from service.settings.limits import ADAPTIVE, Shedding

SMOOTHING = 0.3  # weight of the newest sample in the smoothed lag
CLIP = 2.0  # a sample counts for at most this many thresholds
STOP_FRACTION = 0.5  # shedding stops under this fraction of the threshold


@dataclass
class Overload:
    """The shedding decision of one app: the smoothed loop lag and the requests in flight.
    `inflight` counts every admitted request of the shed routes; those of them waiting for
    an admission slot now (`waiters`) are not in flight for the limit."""

    lag_threshold: float  # seconds; 0: lag never sheds
    limit: InflightLimit = field(default_factory=lambda: FixedLimit(20))
    smoothed_lag: float = 0.0
    lagging: bool = False
    inflight: int = 0
    waiters: Waiters = field(default_factory=Waiters)

    @classmethod
    def from_settings(cls, settings: Shedding, now: float) -> Overload:
        limit: InflightLimit = (
            GradientLimit(MIN_LIMIT, settings.max_inflight, now=now)
            if settings.admission == ADAPTIVE
            else FixedLimit(settings.max_inflight)
        )
        return cls(settings.loop_lag_seconds, limit)

    def observe_lag(self, lag: float) -> bool:
        """Take one probe's lag in seconds; True when shedding for lag started or stopped."""
        if self.lag_threshold <= 0:
            return False
        sample = min(max(lag, 0.0), CLIP * self.lag_threshold)
        self.smoothed_lag += SMOOTHING * (sample - self.smoothed_lag)
        if not self.lagging and self.smoothed_lag >= self.lag_threshold:
            self.lagging = True
            return True
        if self.lagging and self.smoothed_lag < STOP_FRACTION * self.lag_threshold:
            self.lagging = False
            return True
        return False

    def refusal(self) -> str | None:
        """Why a new request is refused now (loop_lag | inflight), or None to admit it."""
        if self.lagging:
            return "loop_lag"
        busy = self.inflight - self.waiters.count
        if busy >= self.limit.current() and busy >= self.limit.recheck(time.monotonic()):
            return "inflight"
        return None
