"""The limiter's own health schedule: a background task of the app that checks the shared
limiter (`Admission.check`: a real script call on the limiter's slot) without waiting for a
request, so an idle replica's degraded metric, logs and /readyz tell the truth within
seconds of Redis going away or coming back.

Schedule (docs/decisions/limits.md): every HEALTHY_SECONDS while the limiter answers; every
FAILING_SECONDS after a failure while the breaker is still closed (so an outage opens it in
a fraction of a second more); while the breaker is open, as soon as its cooldown lets one
trial through (ELOVA_REDIS_BREAKER_COOLDOWN_SECONDS, default 1 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from service.limits.admission import Admission
from service.limits.breaker import State

HEALTHY_SECONDS = 2.0
FAILING_SECONDS = 0.25


def next_check_in(admission: Admission) -> float:
    breaker = admission.breaker
    if breaker.state is State.OPEN:
        return max(breaker.seconds_until_trial(), 0.02)
    if breaker.state is State.HALF_OPEN or breaker.failures:
        return FAILING_SECONDS
    return HEALTHY_SECONDS


async def watch(admission: Admission) -> None:
    """Check the limiter forever on the schedule above (cancel to stop)."""
    while True:
        await asyncio.sleep(next_check_in(admission))
        if admission.breaker.allow():
            await admission.check("probe")


@contextlib.asynccontextmanager
async def watching(admission: Admission) -> AsyncIterator[None]:
    if admission.pipeline is None:
        yield
        return
    task = asyncio.get_running_loop().create_task(watch(admission))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
