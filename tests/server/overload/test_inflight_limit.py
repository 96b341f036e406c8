"""The adaptive in-flight limit (service/server/overload/inflight_limit.py), driven by a
model of a replica.

The model: a replica that serves one request in `alone` seconds when nothing else runs and
spends `cpu` seconds of its one core on each, so with k in flight a request takes
max(alone, k × cpu) (processor sharing once the core is saturated). Its throughput stops
growing at k = alone ÷ cpu, the knee; past it only the latency grows. A saturated demand
keeps exactly the limit in flight.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from service.server.overload import inflight_limit as il
from service.server.overload.inflight_limit import FixedLimit, GradientLimit

pytestmark = pytest.mark.unit

MS = 0.001


def replica(alone: float, cpu: float) -> Callable[[int], float]:
    return lambda k: max(alone, k * cpu)


def drive(
    limit: GradientLimit, latency_of: Callable[[int], float], seconds: float,
    start: float = 0.0, demand: int = 1000,
) -> float:  # fmt: skip
    """Saturated demand (at most `demand` in flight) for `seconds`: each turn starts as
    many requests as the limit lets in, all finishing together; returns the time reached."""
    now = start
    while now < start + seconds:
        k = min(demand, limit.current())
        latency = latency_of(k)
        for _ in range(k):
            limit.observe(now, now + latency, k)
        now += latency
    return now


def fresh(max_limit: int = 20) -> GradientLimit:
    return GradientLimit(il.MIN_LIMIT, max_limit, now=0.0, jitter=lambda: 0.5)


def test_the_first_busy_window_measures_a_baseline_holding_the_limit_at_its_minimum() -> None:
    limit = fresh()
    assert limit.current() == 20 and limit.baseline is None  # the fixed cap's value at first
    for i in range(il.WINDOW_SAMPLES):  # a window with 20 in flight: at the limit
        limit.observe(i * 0.004, i * 0.004 + 10 * MS, 20)
    assert limit.holding_since is not None and limit.current() == il.MIN_LIMIT
    start = limit.holding_since
    for i in range(il.BASELINE_SAMPLES - 1):
        limit.observe(start + i * 0.001, start + i * 0.001 + 2 * MS, 2)
    assert limit.current() == il.MIN_LIMIT
    assert limit.observe(start + 0.1, start + 0.1 + 2 * MS, 2)  # the last sample ends it
    assert limit.baseline == pytest.approx(2 * MS)
    assert limit.current() == 20  # from the fixed cap's value, shrunk by what it measures


def test_a_light_window_is_a_baseline_without_a_hold() -> None:
    limit = fresh()
    for i in range(il.WINDOW_SAMPLES):
        limit.observe(i * 0.005, i * 0.005 + 3 * MS, 1)
    assert limit.holding_since is None and limit.current() == 20
    assert limit.baseline == pytest.approx(3 * MS)


def test_a_limit_that_does_not_bind_is_never_held() -> None:
    """Load under the limit, for long: no hold refuses what the cap would admit."""
    limit = fresh()
    drive(limit, replica(2 * MS, 0.5 * MS), 30.0, demand=12)  # 12 in flight, limit 20
    assert limit.holding_since is None and limit.baseline is None and limit.current() == 20


def burst(limit: GradientLimit, at: float) -> None:
    """As many parallel calls as the limit admits, twice over, all within half a window."""
    inflight = limit.current()
    for i in range(max(il.WINDOW_SAMPLES, 2 * inflight)):
        limit.observe(at, at + 0.05 + i * 0.1 * MS, inflight)


def test_a_burst_to_a_fresh_or_idle_replica_is_not_held() -> None:
    """Parallel calls for less than a window are admitted up to the limit: on a fresh
    replica, and on one that was busy long ago (its idle spell restarts the window)."""
    limit = fresh()
    burst(limit, at=0.0)
    assert limit.holding_since is None and limit.current() == 20
    drive(limit, replica(2 * MS, 0.5 * MS), 5.0, start=1.0)  # busy: held, settled
    settled = limit.current()
    burst(limit, at=30.0)  # past the next hold's time, after 25 s of nothing
    assert limit.holding_since is None and limit.current() == settled


@pytest.mark.parametrize(
    ("alone", "cpu"), [(2 * MS, 0.5 * MS), (3 * MS, 0.25 * MS), (10 * MS, 1 * MS)]
)
def test_under_overload_it_settles_near_the_knee(alone: float, cpu: float) -> None:
    """Throughput near the best (at least 90% of the knee's) with the latency within twice
    the latency alone."""
    limit = fresh(max_limit=100)
    latency_of = replica(alone, cpu)
    now = drive(limit, latency_of, 5.0)
    knee = alone / cpu
    seen = []
    for _ in range(50):
        now = drive(limit, latency_of, il.WINDOW_SECONDS, start=now)
        seen.append(limit.current())
    assert min(seen) >= 0.9 * knee
    assert max(latency_of(k) for k in seen) <= 2 * alone


def test_a_limit_nobody_reaches_does_not_grow() -> None:
    limit = fresh()
    drive(limit, replica(2 * MS, 0.5 * MS), 5.0)  # settles near the knee, 4 to 6
    settled = limit.current()
    assert settled < 10
    now = drive(limit, replica(2 * MS, 0.5 * MS), 0.2, start=5.0, demand=3)  # light load
    after_transition = limit.current()  # (the window open at the change mixes both)
    assert after_transition <= settled + 2
    drive(limit, replica(2 * MS, 0.5 * MS), 5.0, start=now, demand=3)  # 3 at most, for long
    assert limit.current() == after_transition


def test_a_slower_workload_lowers_the_limit_then_the_baseline_follows_it() -> None:
    """PostgreSQL gets five times slower for everyone: at first that looks like queueing and
    the limit falls to its minimum, where the latency is a baseline again; from there the
    limit grows back to the new knee within seconds, not at the next periodic hold."""
    limit = fresh(max_limit=100)
    now = drive(limit, replica(2 * MS, 0.5 * MS), 5.0)
    slower = replica(10 * MS, 0.5 * MS)  # knee at 20
    now = drive(limit, slower, 1.0, start=now)
    assert limit.current() <= 3
    drive(limit, slower, 4.0, start=now)
    assert limit.baseline == pytest.approx(10 * MS, rel=0.2)
    assert limit.current() >= 15


def test_it_measures_the_baseline_again_every_interval() -> None:
    limit = fresh()
    now = drive(limit, replica(2 * MS, 0.5 * MS), 2.0)  # the first hold, and its recheck
    interval = il.BASELINE_INTERVAL * (1 + il.BASELINE_JITTER * 0.5)
    # (the first busy window took one window: the recheck and the next hold come after it)
    first_recheck = il.WINDOW_SECONDS + il.FIRST_RECHECK * 1.1
    assert limit.next_hold == pytest.approx(first_recheck + interval, abs=0.1)
    due = limit.next_hold
    while limit.holding_since is None and now < due + 2 * il.WINDOW_SECONDS:
        now = drive(limit, replica(2 * MS, 0.5 * MS), 0.001, start=now)  # the next busy window
    assert limit.holding_since is not None
    assert due <= limit.holding_since <= due + 2 * il.WINDOW_SECONDS
    assert limit.current() == il.MIN_LIMIT
    # A request that started before the hold was admitted at the old limit: not counted.
    limit.observe(limit.holding_since - 0.001, now + 0.05, 6)
    for _ in range(il.BASELINE_SAMPLES):
        limit.observe(now, now + 3 * MS, 2)
        now += 3 * MS
    assert limit.holding_since is None
    assert limit.baseline == pytest.approx(3 * MS)


def test_a_baseline_measured_slow_comes_down_with_the_first_faster_window() -> None:
    """The first baseline of a fresh replica meets cold caches and new PostgreSQL
    connections: measured too high, it would let a queue build until the next hold; it is
    measured again a second later, and any window faster than it lowers it at once."""
    limit = fresh(max_limit=20)
    for i in range(il.WINDOW_SAMPLES):
        limit.observe(i * 0.05, i * 0.05 + 50 * MS, 2)  # cold: 50 ms
    assert limit.baseline == pytest.approx(50 * MS)
    latency_of = replica(2 * MS, 0.5 * MS)
    now = drive(limit, latency_of, 0.5, start=1.0)
    assert limit.baseline == pytest.approx(10 * MS)  # the latency at 20 in flight: faster
    now = drive(limit, latency_of, 2.0, start=now)  # the second hold
    assert limit.baseline == pytest.approx(2 * MS)
    drive(limit, latency_of, 1.0, start=now)
    assert 4 <= limit.current() <= 8


def test_light_load_keeps_the_baseline_fresh() -> None:
    limit = fresh()
    now = drive(limit, replica(2 * MS, 0.5 * MS), 1.0)
    drive(limit, replica(4 * MS, 0.5 * MS), 1.0, start=now, demand=1)  # one client
    assert limit.baseline == pytest.approx(4 * MS)


def test_the_limit_stays_within_its_bounds() -> None:
    limit = fresh(max_limit=8)
    drive(limit, replica(2 * MS, 0.01 * MS), 3.0)  # latency never grows: up to the cap
    assert limit.current() == 8
    # Past 2 in flight the latency grows fourfold and more a request: down to the floor,
    # from which it probes one request higher now and then (the headroom).
    drive(limit, lambda k: 2 * MS * max(1, 3 * k - 5), 10.0, start=3.0)
    assert limit.current() <= il.MIN_LIMIT + 1
    assert GradientLimit(il.MIN_LIMIT, 1).current() == 1  # a cap of 1 is kept


def test_the_fixed_cap_never_moves() -> None:
    cap = FixedLimit(20)
    assert not cap.observe(0.0, 5.0, 20)
    assert cap.current() == 20


def test_percentile() -> None:
    values = [float(i) for i in range(1, 11)]
    assert il.percentile(values, 0.9) == 9.0
    assert il.percentile(values, 0.5) == 5.0
    assert il.percentile([7.0], 0.9) == 7.0


def test_a_hold_ends_by_time_when_its_requests_are_slow() -> None:
    limit = fresh()
    for i in range(il.WINDOW_SAMPLES):
        limit.observe(i * 0.004, i * 0.004 + 10 * MS, 20)
    assert limit.holding_since is not None
    start = limit.holding_since
    # Two slow calls hold both places: nothing finishes, nothing else is admitted.
    assert limit.recheck(start + il.HOLD_SECONDS / 2) == il.MIN_LIMIT
    assert limit.recheck(start + il.HOLD_SECONDS) == 20  # ended unmeasured: the cap again
    assert limit.holding_since is None and limit.baseline is None
    assert limit.next_hold >= start + il.HOLD_SECONDS + il.BASELINE_INTERVAL


def test_a_hold_cut_short_keeps_the_baseline_it_had() -> None:
    limit = fresh()
    for i in range(il.WINDOW_SAMPLES):
        limit.observe(i * 0.004, i * 0.004 + 10 * MS, 20)
    start = limit.holding_since
    assert start is not None
    for i in range(il.BASELINE_SAMPLES):
        limit.observe(start + i * 0.001, start + i * 0.001 + 2 * MS, 2)
    assert limit.baseline == pytest.approx(2 * MS)
    limit.holding_since = 10.0  # the next hold, started at 10 s
    limit.observe(10.0, 10.0 + 1 * MS, 2)  # one fast sample, then a slow finish past the bound
    assert limit.observe(10.0, 10.0 + il.HOLD_SECONDS, 2)
    assert limit.holding_since is None
    assert limit.baseline == pytest.approx(2 * MS)  # not the few samples' 1 ms
