"""How many requests this replica lets in flight on the shed routes: a fixed cap
(`FixedLimit`), or a limit that adapts to the latency it measures (`GradientLimit`).

Pure: times are passed in (monotonic seconds), nothing here reads a clock or does I/O.
shedding.py feeds every admitted request's latency (`observe`) and compares the requests
in flight with `current()`. Why a gradient on measured latency, the alternatives weighed,
the tuning and why the fixed cap is the default: docs/decisions/floods.md, "Adaptive
in-flight limit (issue 23)".
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

PERCENTILE = 0.9  # a window's latency: its 90th percentile
TOLERANCE = 0.25  # queueing allowed on top of the baseline before the limit shrinks
HEADROOM = 0.5  # added to the limit each window (what lets it probe upward)
MIN_GRADIENT = 0.5
MAX_GRADIENT = 2.0
SMOOTHING = 0.3  # weight of a window's new limit
WINDOW_SECONDS = 0.1
WINDOW_SAMPLES = 25  # a p90 of fewer would be a sample or two
BASELINE_SAMPLES = 20
HOLD_SECONDS = 1.0  # a baseline hold ends by then even if its samples have not finished
BASELINE_INTERVAL = 10.0
FIRST_RECHECK = 1.0  # the first baseline is measured cold: again this soon after
BASELINE_JITTER = 0.2  # share of the interval added at random (replicas do not all pause at once)
MIN_LIMIT = 2


class InflightLimit(Protocol):
    """What load shedding asks of a limit."""

    def current(self) -> int: ...

    def recheck(self, now: float) -> int:
        """`current()` once what is due by time now is done (a baseline hold's end)."""
        ...

    def observe(self, started: float, finished: float, inflight: int) -> bool:
        """One admitted request's start and end and the requests in flight when it started;
        True when the limit changed."""
        ...


@dataclass
class FixedLimit:
    """The fallback: `ELOVA_SHED_ADMISSION=fixed`, a cap of `ELOVA_SHED_MAX_INFLIGHT`."""

    cap: int

    def current(self) -> int:
        return self.cap

    def recheck(self, now: float) -> int:
        return self.cap

    def observe(self, started: float, finished: float, inflight: int) -> bool:
        return False


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(share * len(ordered)) - 1))]


@dataclass
class GradientLimit:
    """The adaptive limit: a gradient controller in the manner of Envoy's adaptive
    concurrency filter, on this replica's own latencies. `baseline` and `latency` are
    seconds, None until measured; `limit` is the real-valued limit, `current()` its whole
    part (or `min_limit` while a baseline is being measured).

    - **Baseline**: the latency at low concurrency (at most `min_limit` in flight), a
      window's `PERCENTILE`. Any window whose requests never exceeded `min_limit` in flight
      measures it (a replica under light load keeps it fresh); under load, every
      `BASELINE_INTERVAL` seconds (jittered; the first time after `FIRST_RECHECK`, the first
      baseline having met cold caches and new connections) the limit is held at `min_limit`
      until `BASELINE_SAMPLES` requests that started inside that hold have finished, or
      `HOLD_SECONDS` have passed (then the baseline stays as it was). A hold
      starts only at the end of a window whose requests reached the limit (a window's worth
      of load that the limit holds back): a replica the limit does not bind is never held,
      and neither is a burst shorter than a window nor the first calls to a fresh or idle
      replica. Until the first baseline the limit is `max_limit`, the fixed cap's value,
      and does not move. A window faster than the baseline lowers it: latency at a higher
      concurrency is never really lower, so the baseline was measured slow.
    - **Window**: at least `WINDOW_SECONDS` and `WINDOW_SAMPLES` admitted requests; its
      latency is their `PERCENTILE`.
    - **Update**, at the end of a window: gradient = baseline × (1 + `TOLERANCE`) ÷ window
      latency, clipped to [`MIN_GRADIENT`, `MAX_GRADIENT`]; new limit = gradient × limit +
      `HEADROOM`, smoothed (`SMOOTHING`) and kept within [min_limit, max_limit]. A window
      that never came near the limit (peak in flight under half of it) does not raise it: a
      limit nobody uses says nothing about the latency at that limit. A window restarts
      after a pause of `WINDOW_SECONDS` with nothing finishing: an idle spell is not part
      of it.
    """

    min_limit: int
    max_limit: int
    now: float = 0.0  # when the limit was made: the first baseline hold starts there
    jitter: Callable[[], float] = random.random
    limit: float = field(init=False)
    baseline: float | None = None
    latency: float | None = None  # the last window's
    holding_since: float | None = None  # a baseline hold in progress, started then
    next_hold: float = field(init=False)  # a busy window closing from then starts a hold
    windows: int = 0  # windows closed: updates made
    _window: list[float] = field(default_factory=list)
    _window_started: float = field(init=False)
    _peak: int = 0
    _last_finished: float = field(init=False)
    _hold_samples: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.min_limit = min(self.min_limit, self.max_limit)
        self.limit = float(self.max_limit)
        self._window_started = self.now
        self._last_finished = self.now
        self.next_hold = self.now  # no baseline yet: the first busy window measures it

    def current(self) -> int:
        if self.holding_since is not None:
            return self.min_limit
        return max(self.min_limit, int(self.limit))

    def recheck(self, now: float) -> int:
        """A hold past `HOLD_SECONDS` ends now, measured or not: slow requests in flight
        cannot keep the limit at `min_limit` (they would shut the replica until they end)."""
        if self.holding_since is not None and now - self.holding_since >= HOLD_SECONDS:
            self._end_hold(now)
        return self.current()

    def observe(self, started: float, finished: float, inflight: int) -> bool:
        before = self.current()
        latency = finished - started
        if self.holding_since is not None:
            if started >= self.holding_since:
                self._hold_samples.append(latency)
            if (
                len(self._hold_samples) >= BASELINE_SAMPLES
                or finished - self.holding_since >= HOLD_SECONDS
            ):
                self._end_hold(finished)
            return self.current() != before
        if started - self._last_finished > WINDOW_SECONDS:
            self._restart_window(started)  # after an idle spell
        self._last_finished = max(self._last_finished, finished)
        self._window.append(latency)
        self._peak = max(self._peak, inflight)
        if finished - self._window_started >= WINDOW_SECONDS and (
            len(self._window) >= WINDOW_SAMPLES
        ):
            self._close_window(finished)
        return self.current() != before

    def _start_hold(self, now: float) -> None:
        self.holding_since = now
        self._hold_samples = []

    def _end_hold(self, now: float) -> None:
        """The hold's baseline when `BASELINE_SAMPLES` finished inside it; one cut short by
        `HOLD_SECONDS` keeps the baseline it had (its few samples would be the fast ones)."""
        measured = len(self._hold_samples) >= BASELINE_SAMPLES
        self._schedule_hold(now, first=measured and self.baseline is None)
        if measured:
            self.baseline = percentile(self._hold_samples, PERCENTILE)
        self.holding_since = None
        self._hold_samples = []
        self._restart_window(now)
        self._last_finished = now

    def _schedule_hold(self, now: float, *, first: bool) -> None:
        """The next hold: soon after the first baseline (it met a cold replica), else after
        the interval (a hold cut short too); jittered."""
        interval = FIRST_RECHECK if first else BASELINE_INTERVAL
        self.next_hold = now + interval * (1 + BASELINE_JITTER * self.jitter())

    def _restart_window(self, now: float) -> None:
        self._window = []
        self._peak = 0
        self._window_started = now

    def _close_window(self, now: float) -> None:
        latency = percentile(self._window, PERCENTILE)
        self.latency = latency
        self.windows += 1
        busy = self._peak > self.min_limit
        if not busy:
            # Nothing queued behind this window's requests: its latency is a baseline.
            if self.baseline is None:
                self._schedule_hold(now, first=True)
            self.baseline = latency
        elif self._peak >= int(self.limit) and now >= self.next_hold:
            self._start_hold(now)  # (its end restarts the window)
            return
        if self.baseline is None:
            self._restart_window(now)  # nothing to compare with yet: the cap holds
            return
        if latency < self.baseline:
            # More in flight and yet faster: the baseline was measured slow (a cold start,
            # a neighbour's burst), and a limit computed from it would let a queue build.
            self.baseline = latency
        gradient = self.baseline * (1 + TOLERANCE) / latency if latency > 0 else MAX_GRADIENT
        gradient = min(MAX_GRADIENT, max(MIN_GRADIENT, gradient))
        proposed = gradient * self.limit + HEADROOM
        if self._peak * 2 < self.limit:
            proposed = min(proposed, self.limit)  # unused: no evidence for a higher limit
        smoothed = (1 - SMOOTHING) * self.limit + SMOOTHING * proposed
        self.limit = min(float(self.max_limit), max(float(self.min_limit), smoothed))
        self._restart_window(now)
