"""Pure parts: the circuit breaker, the per-process limiter and the header rendering."""

from __future__ import annotations

from uuid import uuid4

import pytest

from service.limits.breaker import CircuitBreaker, State
from service.limits.budget import Budget
from service.limits.local_limiter import LocalLimiter
from service.settings.limits import Limits

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _state(breaker: CircuitBreaker) -> State:
    return breaker.state  # through a call, so each check reads the state afresh


def test_breaker_opens_after_the_threshold_and_lets_one_trial_through() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_seconds=1.0, clock=clock)
    for _ in range(2):
        assert breaker.allow()
        breaker.record_failure()
    assert _state(breaker) is State.CLOSED
    breaker.record_failure()
    assert _state(breaker) is State.OPEN and not breaker.allow()
    clock.now += 1.0
    assert breaker.allow()  # the trial
    assert _state(breaker) is State.HALF_OPEN and not breaker.allow()
    breaker.record_failure()  # a failed trial opens it for another cooldown
    assert _state(breaker) is State.OPEN and not breaker.allow()
    clock.now += 1.0
    assert breaker.allow()
    breaker.abandon()  # a cancelled trial: the next caller may try
    assert breaker.allow()
    breaker.record_success()
    assert _state(breaker) is State.CLOSED and breaker.allow()


def test_success_resets_the_failure_count() -> None:
    breaker = CircuitBreaker(failure_threshold=2)
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert _state(breaker) is State.CLOSED


@pytest.mark.parametrize(
    ("cap", "replicas", "share"), [(4, 1, 4), (4, 3, 1), (2, 3, 1), (60, 2, 30), (1, 5, 1)]
)
def test_per_replica_share(cap: int, replicas: int, share: int) -> None:
    """Degraded mode: each replica takes its share of the shared budgets (the global cap is
    per replica in every mode, so it is not shared out)."""
    limits = Limits(global_concurrency=cap, account_concurrency=cap, approval_per_minute=cap)
    local = LocalLimiter.share(limits, replicas)
    assert (local.account_cap, local.per_minute) == (share, share)


def test_local_bucket_refills_and_leases_expire() -> None:
    clock = Clock()
    local = LocalLimiter(account_cap=1, per_minute=2, daily_cap=None, lease_seconds=5, clock=clock)
    account, approval = uuid4(), uuid4()
    assert local.acquire("a", account, approval).admitted
    refused = local.acquire("b", account, approval)
    assert (refused.admitted, refused.limit) == (False, "account")
    clock.now += 5  # the lease of "a" ended without a release
    assert local.acquire("b", account, approval).admitted  # second and last token
    local.release("b")
    refused = local.acquire("c", account, approval)
    assert refused.limit == "approval" and refused.retry_after_seconds() == 25  # 30 s a token
    clock.now += 25
    assert local.acquire("c", account, approval).admitted


@pytest.mark.parametrize(
    ("budget", "state"),
    [
        (Budget(60, 60.0), '"approval";r=60;t=1'),
        (Budget(60, 59.0), '"approval";r=59;t=1'),
        (Budget(60, 0.25), '"approval";r=0;t=1'),
        (Budget(3, 0.0), '"approval";r=0;t=20'),
        (Budget(3, 2.5), '"approval";r=2;t=10'),
        (Budget(3, 1.0, 10, 4, 3600.2), '"approval";r=1;t=20, "account_daily";r=6;t=3601'),
    ],
)
def test_ratelimit_header(budget: Budget, state: str) -> None:
    assert budget.headers()["RateLimit"] == state
