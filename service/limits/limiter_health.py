"""The limiter's own health schedule: background tasks of the app that check the shared
limiter (`Admission.check`: a real script call on a Redis server) without waiting for a
request, so an idle replica's degraded metric, logs and /readyz tell the truth within
seconds of Redis going away or coming back; in sentinel mode, one more follows the master
the sentinels name. The schedule's reasons and times: docs/decisions/limits.md, "Redis
engines (issue 12)", Schedule and Switchover.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from redis.exceptions import RedisError

from service.limits.admission import Admission
from service.limits.breaker import State

HEALTHY_SECONDS = 2.0
FAILING_SECONDS = 0.25
SENTINEL_SECONDS = 0.5


def next_check_in(admission: Admission) -> float:
    """Seconds to the next check: HEALTHY_SECONDS while the limiter answers;
    FAILING_SECONDS after a failure while the breaker is still closed (so an outage opens it
    in a fraction of a second more) and while it is half-open; while it is open, as soon as
    its cooldown lets one trial through (ELOVA_REDIS_BREAKER_COOLDOWN_SECONDS, default 1 s)."""
    breaker = admission.breaker
    if breaker.state is State.OPEN:
        return max(breaker.seconds_until_trial(), 0.02)
    if breaker.state is State.HALF_OPEN or breaker.failures:
        return FAILING_SECONDS
    return HEALTHY_SECONDS


async def watch(admission: Admission) -> None:
    """Check the limiter forever on the schedule of `next_check_in` (cancel to stop)."""
    while True:
        await asyncio.sleep(next_check_in(admission))
        if admission.breaker.allow():
            await admission.check("probe")


async def follow_sentinels(admission: Admission, timeout: float) -> None:
    """Ask the sentinels every SENTINEL_SECONDS which server is the master (`Route.verify`),
    forever (cancel to stop), and move the limiter's connection when they name another one:
    after a switchover the old master keeps taking writes until the sentinels demote it
    (about 10 s later), so waiting for it to refuse would split the replicas between two
    masters for that long. A failed question is the health check's business, not this
    task's."""
    assert admission.pipeline is not None
    route = admission.pipeline.route
    while True:
        await asyncio.sleep(SENTINEL_SECONDS)
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(timeout):
                await route.verify()


@contextlib.asynccontextmanager
async def watching(admission: Admission) -> AsyncIterator[None]:
    pipeline = admission.pipeline
    if pipeline is None:
        yield
        return
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(watch(admission))]
    if pipeline.route.sentinel:
        tasks.append(loop.create_task(follow_sentinels(admission, pipeline.bound)))
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
