"""The overload decision of load shedding, sample by sample (service/server/overload/state.py)."""

from __future__ import annotations

import pytest

from service.config import Config
from service.errors import ConfigError
from service.server.overload.inflight_limit import FixedLimit, GradientLimit
from service.server.overload.state import Overload
from service.server.refusal_pacing import RefusalPacing, RefusalRuns
from service.settings.limits import Connections

pytestmark = pytest.mark.unit

THRESHOLD = 0.05


def feed(overload: Overload, lag: float, times: int) -> list[bool]:
    return [overload.observe_lag(lag) for _ in range(times)]


def test_one_long_pause_does_not_start_shedding() -> None:
    overload = Overload(THRESHOLD)
    overload.observe_lag(2.0)  # a GC or one big answer: clipped, smoothed
    assert not overload.lagging
    assert overload.refusal() is None


def test_a_loop_that_stays_late_starts_shedding_within_a_few_probes() -> None:
    overload = Overload(THRESHOLD)
    changes = feed(overload, 0.2, 3)
    assert overload.lagging
    assert changes.count(True) == 1
    assert overload.refusal() == "loop_lag"


def test_shedding_stops_only_under_half_the_threshold() -> None:
    overload = Overload(THRESHOLD)
    feed(overload, 0.2, 10)
    feed(overload, 0.04, 20)  # below the threshold but above half of it: still shedding
    assert overload.lagging
    changes = feed(overload, 0.0, 10)
    assert not overload.lagging
    assert changes.count(True) == 1
    assert overload.refusal() is None


def test_no_flapping_around_the_threshold() -> None:
    overload = Overload(THRESHOLD)
    changes = [overload.observe_lag(lag) for lag in [0.06, 0.04] * 50]
    assert changes.count(True) <= 1


def test_lag_zero_threshold_never_sheds() -> None:
    overload = Overload(0.0)
    feed(overload, 5.0, 20)
    assert not overload.lagging


def test_requests_in_flight_at_the_cap_are_refused() -> None:
    overload = Overload(THRESHOLD, FixedLimit(2))
    overload.inflight = 1
    assert overload.refusal() is None
    overload.inflight = 2
    assert overload.refusal() == "inflight"


BASE = {"ELOVA_DATABASE_URL": "postgresql://u@h/db"}


def test_settings_defaults_follow_the_pool() -> None:
    cfg = Config.from_env(BASE, need_key=False)
    assert cfg.shedding.loop_lag_seconds == 0.05
    assert cfg.shedding.max_inflight == 2 * cfg.db_pool_max == 20
    assert cfg.shedding.admission == "fixed"  # issue 42: the adaptive limit is opt-in
    assert Overload.from_settings(cfg.shedding, 0.0).limit == FixedLimit(20)
    adaptive = Config.from_env({**BASE, "ELOVA_SHED_ADMISSION": "adaptive"}, need_key=False)
    limit = Overload.from_settings(adaptive.shedding, 0.0).limit
    assert isinstance(limit, GradientLimit) and limit.current() == 20  # the cap until needed
    bigger = Config.from_env({**BASE, "ELOVA_DB_POOL_MAX": "16"}, need_key=False)
    assert bigger.shedding.max_inflight == 32
    conns = cfg.connections
    assert (conns.max_connections, conns.header_timeout_seconds) == (1000, 10.0)
    assert (conns.body_timeout_seconds, conns.keepalive_timeout_seconds) == (10.0, 75.0)
    assert (conns.pace_refusals_after, conns.longest_refusal_pause_seconds) == (10, 1.0)


@pytest.mark.parametrize(
    ("name", "raw"),
    [
        ("ELOVA_SHED_LOOP_LAG_MS", "-1"),
        ("ELOVA_SHED_LOOP_LAG_MS", "10001"),
        ("ELOVA_SHED_MAX_INFLIGHT", "0"),
        ("ELOVA_SHED_ADMISSION", "gradient"),
        ("ELOVA_MAX_CONNECTIONS", "0"),
        ("ELOVA_HEADER_TIMEOUT_SECONDS", "0"),
        ("ELOVA_BODY_TIMEOUT_SECONDS", "nan"),
        ("ELOVA_KEEPALIVE_TIMEOUT_SECONDS", "-5"),
        ("ELOVA_PACE_REFUSALS_AFTER", "-1"),
        ("ELOVA_LONGEST_REFUSAL_PAUSE_MS", "0"),
        ("ELOVA_LONGEST_REFUSAL_PAUSE_MS", "60001"),
    ],
)
def test_malformed_settings_are_refused_by_name(name: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=name):
        Config.from_env({**BASE, name: raw}, need_key=False)


def test_refusal_pacing_doubles_up_to_the_longest_pause_and_resets() -> None:
    pacing = RefusalPacing(Connections(pace_refusals_after=3, longest_refusal_pause_seconds=0.1))
    now = 100.0
    pauses = []
    for _ in range(9):
        pauses.append(pacing.pause(401, now))
        pacing.answered(401, now + pauses[-1])
        now += pauses[-1] + 0.001
    assert pauses == [0.0, 0.0, 0.0, 0.01, 0.02, 0.04, 0.08, 0.1, 0.1]
    assert pacing.pause(200, now) == 0.0  # an answer that is not a refusal ends the run
    assert [pacing.pause(status, now) for status in (429, 413, 404, 401)] == [0, 0, 0, 0.01]
    assert pacing.pause(200, now) == 0.0
    # a 503 (overloaded: retry shortly) is paced from the first one of a run
    assert [pacing.pause(503, now) for _ in range(3)] == [0.01, 0.02, 0.04]
    # a second between one refusal's answer and the next request ends it too
    pacing.answered(404, now)
    assert pacing.pause(401, now + 1.01) == 0.0


def test_refusal_pacing_off() -> None:
    pacing = RefusalPacing(Connections(pace_refusals_after=0))
    assert all(pacing.pause(429, float(i)) == 0.0 for i in range(100))


def test_refusal_runs_by_key_are_bounded_and_only_refusals_start_one() -> None:
    runs = RefusalRuns(Connections(pace_refusals_after=1))
    assert runs.pause("good", 200, 0.0) == 0.0  # an answer that is no refusal starts nothing
    assert runs.pause("bad", 401, 0.0) == 0.0
    runs.answered("bad", 401, 0.0)
    assert runs.pause("bad", 401, 0.1) == 0.01
    assert runs.pause("bad", 200, 0.2) == 0.0  # a good answer ends the run
    assert runs.pause("bad", 401, 0.3) == 0.0
    for i in range(RefusalRuns.MAX_KEYS + 10):
        runs.pause(i, 429, 1.0)
    assert len(runs._runs) == RefusalRuns.MAX_KEYS


def test_requests_waiting_for_a_slot_are_not_in_flight() -> None:
    overload = Overload(THRESHOLD, FixedLimit(2))
    overload.inflight = 10
    overload.waiters.count = 9  # e.g. in their accounts' queues
    assert overload.refusal() is None
    overload.waiters.count = 8
    assert overload.refusal() == "inflight"
