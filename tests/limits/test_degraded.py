"""Redis unreachable, slow, restarted: the limiter keeps answering at once, per process."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis.asyncio as aioredis

from service.errors import LimitExceeded
from service.limits.admission import Grant
from tests.limits.conftest import (
    MakeAdmission,
    RecordingMetrics,
    RedisServer,
    free_port,
    make_caller,
    wait_for,
)

LOGGER = "service.limits"


async def test_closed_port_answers_at_once_with_the_per_process_share(
    make_admission: MakeAdmission, metrics: RecordingMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    # Two replicas expected: each keeps half of every shared budget while Redis is away (the
    # global cap is each replica's own in every mode). Refusals come at once: no slot wait.
    admission = make_admission(
        f"redis://127.0.0.1:{free_port()}/0", expected_replicas=2, slot_wait_seconds=0
    )
    # Until the breaker opens, a failure may be a blip: refuse rather than stack a local
    # admission on the shared caps. Each answer comes at once.
    for i in range(2):
        started = time.monotonic()
        with pytest.raises(LimitExceeded) as refused:
            await admission.acquire(f"blip-{i}", make_caller())
        assert time.monotonic() - started < 0.3
        assert refused.value.limit == "global"
        retry = refused.value.retry_after_seconds
        assert retry in (1, 2)
        assert refused.value.headers["RateLimit"] == f'"approval";r=0;t={retry}'
        assert refused.value.headers["RateLimit-Policy"] == '"approval";q=60;w=60'
        assert not admission.degraded
    grants: list[Grant] = []
    for i in range(4):
        started = time.monotonic()
        grants.append(await admission.acquire(f"down-{i}", make_caller()))
        assert time.monotonic() - started < 0.3
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("down-4", make_caller())
    assert time.monotonic() - started < 0.3
    assert refused.value.limit == "global"  # this replica's own 4, not shared out
    assert not any(g.shared for g in grants)
    # Per account: 2 / 2 = 1; per approval: 60 / 2 = 30 a minute.
    for grant in grants:
        await admission.release(grant)
    caller = make_caller()
    grant = await admission.acquire("acct-0", caller)
    assert grant.headers()["RateLimit-Policy"] == '"approval";q=30;w=60'
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("acct-1", make_caller(account_id=caller.account_id))
    assert refused.value.limit == "account"
    assert admission.degraded
    assert metrics.recorded_degraded == [True]
    assert metrics.registry.get_sample_value("elova_mcp_limiter_degraded") == 1
    entering = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(entering) == 1
    assert {op for op, _, error in metrics.recorded_redis_calls if error} == {"admit"}


async def test_many_requests_against_a_dead_redis_never_stall(
    make_admission: MakeAdmission,
) -> None:
    admission = make_admission(
        f"redis://127.0.0.1:{free_port()}/0", global_concurrency=100, account_concurrency=100
    )
    started = time.monotonic()
    answered = 0
    for i in range(50):
        try:
            await admission.release(await admission.acquire(f"many-{i}", make_caller()))
            answered += 1
        except LimitExceeded:
            pass  # the two failures before the breaker opens
    assert time.monotonic() - started < 1.0
    assert answered == 48


async def test_without_redis_the_per_process_limiter_is_the_normal_mode(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    admission = make_admission(None)
    callers = [make_caller() for _ in range(10)]
    results = await asyncio.gather(
        *(admission.acquire(f"n-{i}", c) for i, c in enumerate(callers)), return_exceptions=True
    )
    assert sum(isinstance(r, Grant) for r in results) == 4  # full caps: one replica expected
    assert not admission.degraded
    assert metrics.recorded_degraded == []
    for r in results:
        if isinstance(r, Grant):
            await admission.release(r)
            await admission.release(r)
    assert admission.local.in_flight == 0


async def test_recovers_shared_limits_when_redis_returns(
    make_admission: MakeAdmission,
    redis_server: RedisServer,
    metrics: RecordingMetrics,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    admission = make_admission(redis_server.url)
    before = await admission.acquire("before", make_caller())
    assert before.shared

    redis_server.stop()
    outage: list[Grant] = []
    for i in range(5):
        try:
            outage.append(await admission.acquire(f"outage-{i}", make_caller()))
        except LimitExceeded as err:
            assert err.limit == "global" and i < 2
    assert len(outage) == 3 and not any(g.shared for g in outage)
    assert admission.degraded and metrics.recorded_degraded == [True]
    await admission.release(before)  # Redis is away: must neither fail nor wait
    for grant in outage:
        await admission.release(grant)

    redis_server.start()

    # The breaker half-opens after its cooldown; the next admission goes to Redis again.
    async def shared_again() -> bool:
        grant = await admission.acquire(f"probe-{time.monotonic()}", make_caller())
        await admission.release(grant)
        return grant.shared

    await wait_for(shared_again, timeout=3.0)
    assert not admission.degraded
    assert metrics.recorded_degraded == [True, False]
    assert metrics.registry.get_sample_value("elova_mcp_limiter_degraded") == 0
    messages = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert sum("unavailable" in m for m in messages) == 1
    assert sum("restored" in m for m in messages) == 1


async def test_script_is_reloaded_after_a_flush(
    make_admission: MakeAdmission, redis_server: RedisServer
) -> None:
    admission = make_admission(redis_server.url)
    await admission.release(await admission.acquire("load", make_caller()))
    direct = aioredis.Redis.from_url(redis_server.url)
    await direct.script_flush()
    await direct.aclose()
    grant = await admission.acquire("after-flush", make_caller())
    assert grant.shared
    await admission.release(grant)


async def test_timed_out_admission_is_compensated(
    make_admission: MakeAdmission, redis_server: RedisServer
) -> None:
    # A 0.1 s timeout against a 0.4 s stall: the admission surely times out on the replica.
    admission = make_admission(redis_server.url, approval_per_minute=5, timeout=0.1)
    caller = make_caller()
    await admission.release(await admission.acquire("warm", caller))  # script loaded, 4 left
    direct = aioredis.Redis.from_url(redis_server.url)
    keys = admission.keys(caller.account_id, caller.approval_id)

    # Redis stalls 0.4 s: the admission times out on the replica, yet Redis runs it later.
    sleeper = asyncio.create_task(direct.execute_command("DEBUG", "SLEEP", "0.4"))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("timed-out", caller)
    assert time.monotonic() - started < 0.5
    # One slow reply is no outage: refused with the short hint, not admitted locally.
    assert refused.value.limit == "global" and not admission.degraded
    await sleeper

    # Whatever order Redis ran them in, the late admission holds no slot and no token.
    async def settled() -> bool:
        cancelled = await direct.zscore(keys[3], "timed-out")
        return cancelled is not None and await direct.zcard(keys[0]) == 0

    await wait_for(settled, timeout=3.0)
    tokens = float(await direct.hget(keys[1], "tokens") or 0)
    assert 4 <= tokens < 4.1
    # A later admission with the same id (the late one) takes nothing either.
    assert await direct.zscore(keys[0], "timed-out") is None
    await direct.aclose()


async def test_client_gone_mid_admission_is_compensated(
    make_admission: MakeAdmission, redis_server: RedisServer
) -> None:
    admission = make_admission(redis_server.url, approval_per_minute=5)
    caller = make_caller()
    await admission.release(await admission.acquire("warm", caller))
    direct = aioredis.Redis.from_url(redis_server.url)
    keys = admission.keys(caller.account_id, caller.approval_id)
    sleeper = asyncio.create_task(direct.execute_command("DEBUG", "SLEEP", "0.3"))
    await asyncio.sleep(0.05)
    # The client disconnects while the admission is on its way: aiohttp cancels the handler.
    pending = asyncio.create_task(admission.acquire("gone", caller))
    await asyncio.sleep(0.03)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    await sleeper

    async def settled() -> bool:
        cancelled = await direct.zscore(keys[3], "gone")
        return cancelled is not None and await direct.zcard(keys[0]) == 0

    await wait_for(settled, timeout=3.0)
    assert 4 <= float(await direct.hget(keys[1], "tokens") or 0) < 4.1
    await direct.aclose()
