"""The short wait for a concurrency slot, against the machine's Redis: an agent's parallel
calls are all answered, in arrival order, while the caps stay exact, nothing is held while
waiting, and the waits are bounded in time and in number."""

from __future__ import annotations

import asyncio
import time
from uuid import uuid4

import pytest
import redis.asyncio as aioredis

from service.auth.caller import Caller
from service.errors import LimitExceeded
from service.limits.admission import Admission, Grant
from tests.limits.conftest import MakeAdmission, RecordingMetrics, make_caller

# waits timed to fractions of a second: run with no other test beside
pytestmark = pytest.mark.alone


async def _call(
    admission: Admission, caller_id: str, caller: Caller, hold: float, log: list[tuple[str, str]]
) -> str:
    try:
        grant = await admission.acquire(f"{caller_id}-{uuid4().hex[:6]}", caller)
    except LimitExceeded as refused:
        return refused.limit
    log.append(("in", caller_id))
    try:
        await asyncio.sleep(hold)
    finally:
        log.append(("out", caller_id))
        await admission.release(grant)
    return "ok"


def _most_at_once(log: list[tuple[str, str]]) -> int:
    now = most = 0
    for kind, _ in log:
        now += 1 if kind == "in" else -1
        most = max(most, now)
    return most


async def test_an_agents_parallel_calls_all_succeed_two_at_a_time_in_order(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    admission = make_admission()  # the defaults: account cap 2, a wait of 2 s
    agent = make_caller()
    log: list[tuple[str, str]] = []
    results = []
    for n in range(6):  # arriving one after another, all at once in effect
        results.append(asyncio.create_task(_call(admission, f"c{n}", agent, 0.05, log)))
        await asyncio.sleep(0.001)
    assert await asyncio.gather(*results) == ["ok"] * 6
    assert _most_at_once(log) == 2
    assert [name for kind, name in log if kind == "in"] == [f"c{n}" for n in range(6)]
    assert metrics.recorded_refused == []
    waited = metrics.registry.get_sample_value(
        "elova_mcp_limit_slot_wait_seconds_count", {"outcome": "admitted"}
    )
    assert waited == 4


async def test_one_accounts_waits_span_replicas_and_the_cap_stays_exact(
    make_admission: MakeAdmission, redis_client: aioredis.Redis
) -> None:
    replicas = [make_admission(), make_admission()]
    agent = make_caller()
    log: list[tuple[str, str]] = []
    calls = [_call(replicas[n % 2], f"c{n}", agent, 0.03, log) for n in range(10)]
    assert await asyncio.gather(*calls) == ["ok"] * 10
    assert _most_at_once(log) == 2
    key = replicas[0].keys(agent.account_id, agent.approval_id)[0]
    assert await redis_client.zcard(key) == 0


async def test_a_waiting_request_holds_nothing(
    make_admission: MakeAdmission, redis_client: aioredis.Redis
) -> None:
    admission = make_admission(approval_per_minute=10)
    agent = make_caller()
    held = [await admission.acquire(f"held-{n}", agent) for n in range(2)]
    waiting = asyncio.create_task(admission.acquire("waiting", agent))
    await asyncio.sleep(0.2)
    keys = admission.keys(agent.account_id, agent.approval_id)
    assert await redis_client.zcard(keys[0]) == 2  # no lease
    assert 7.9 < float(await redis_client.hget(keys[1], "tokens") or 0) < 8.1  # no token
    assert admission.slots.held == 2  # no replica slot
    await admission.release(held[0])
    grant = await waiting
    assert isinstance(grant, Grant) and grant.budget.remaining == 7
    for g in (held[1], grant):
        await admission.release(g)


async def test_the_wait_is_bounded_and_the_refusal_exact(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    admission = make_admission(slot_wait_seconds=0.3)
    agent = make_caller()
    held = [await admission.acquire(f"held-{n}", agent) for n in range(2)]
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("late", agent)
    assert 0.28 < time.monotonic() - started < 0.6
    assert refused.value.limit == "account" and refused.value.retry_after_seconds in (1, 2)
    assert refused.value.headers["RateLimit"] == '"approval";r=58;t=1'
    assert metrics.recorded_refused == ["account"]
    for grant in held:
        await admission.release(grant)


async def test_waiters_are_bounded_per_account_and_past_the_bound_refused_at_once(
    make_admission: MakeAdmission,
) -> None:
    admission = make_admission(waiters_per_account=1)
    agent = make_caller()
    held = [await admission.acquire(f"held-{n}", agent) for n in range(2)]
    waiting = asyncio.create_task(admission.acquire("waits", agent))
    await asyncio.sleep(0.05)
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("over", agent)
    assert refused.value.limit == "account" and time.monotonic() - started < 0.2
    # Another account is not held up by the busy one's waiters.
    other = await admission.acquire("other", make_caller())
    await admission.release(other)
    await admission.release(held[0])
    await admission.release(await waiting)
    await admission.release(held[1])


async def test_a_full_replica_hands_its_slots_over_in_arrival_order(
    make_admission: MakeAdmission,
) -> None:
    admission = make_admission(global_concurrency=1)
    log: list[tuple[str, str]] = []
    calls = []
    for n in range(4):  # four accounts: only this replica's cap binds
        calls.append(asyncio.create_task(_call(admission, f"a{n}", make_caller(), 0.03, log)))
        await asyncio.sleep(0.001)
    assert await asyncio.gather(*calls) == ["ok"] * 4
    assert _most_at_once(log) == 1
    assert [name for kind, name in log if kind == "in"] == ["a0", "a1", "a2", "a3"]


async def test_without_redis_the_wait_works_on_the_per_process_limits(
    make_admission: MakeAdmission,
) -> None:
    admission = make_admission(None)
    agent = make_caller()
    log: list[tuple[str, str]] = []
    calls = [_call(admission, f"c{n}", agent, 0.03, log) for n in range(4)]
    assert await asyncio.gather(*calls) == ["ok"] * 4
    assert _most_at_once(log) == 2


async def test_requests_whose_account_wait_ended_together_are_refused_for_the_account(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    """Requests queued behind their account's head all reach the end of the wait at once and
    each has one last try; the replica's free slot is taken by the first of them (asking
    Redis), and the others were refused `global`, a full replica, for a wait that was the
    account's (seen as a flake of test_multiprocess). They are refused `account`."""
    admission = make_admission(global_concurrency=3, slot_wait_seconds=0.3)
    agent = make_caller()
    held = [await admission.acquire(f"held-{n}", agent) for n in range(2)]
    waiting = [asyncio.create_task(admission.acquire("head", agent))]
    await asyncio.sleep(0.05)  # the head waits for the account: the next ones queue behind
    waiting += [asyncio.create_task(admission.acquire(f"w{n}", agent)) for n in range(3)]
    refused = await asyncio.gather(*waiting, return_exceptions=True)
    assert [r.limit for r in refused if isinstance(r, LimitExceeded)] == ["account"] * 4
    assert metrics.recorded_refused == ["account"] * 4
    for grant in held:
        await admission.release(grant)
