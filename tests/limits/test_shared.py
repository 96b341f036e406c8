"""The shared limits: admit.lua / release.lua against the machine's Redis, many callers."""

from __future__ import annotations

import asyncio
import math
import time
from uuid import uuid4

import pytest
import redis.asyncio as aioredis

from service.auth.caller import Caller
from service.errors import LimitExceeded
from service.limits.admission import Admission, Grant
from tests.limits.conftest import MakeAdmission, RecordingMetrics, make_caller

# rate budgets and leases timed to fractions of a second: run with no other test beside
pytestmark = pytest.mark.alone


async def _try(
    admission: Admission, caller_index: int, callers: list[Caller]
) -> Grant | LimitExceeded:
    try:
        return await admission.acquire(f"r-{uuid4()}", callers[caller_index])
    except LimitExceeded as err:
        return err


async def _redis_time(client: aioredis.Redis) -> tuple[int, int]:
    seconds, micros = await client.time()
    return int(seconds), int(micros)


async def test_global_cap_holds_under_fifty_concurrent_acquires(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    admission = make_admission(slot_wait_seconds=0)  # refused at once: no wait for a slot
    callers = [make_caller() for _ in range(50)]  # 50 accounts: only the global cap binds
    results = await asyncio.gather(*(_try(admission, i, callers) for i in range(50)))
    grants = [r for r in results if isinstance(r, Grant)]
    refusals = [r for r in results if isinstance(r, LimitExceeded)]
    assert len(grants) == 4
    assert all(g.shared for g in grants)
    assert {r.limit for r in refusals} == {"global"}
    assert metrics.recorded_refused == ["global"] * 46
    # Concurrency refusals advertise a short jittered hint, never the lease time.
    assert {r.retry_after_seconds for r in refusals} <= {1, 2}
    for grant in grants:
        await admission.release(grant)
    assert isinstance(await _try(admission, 0, callers), Grant)


async def test_account_cap_holds_and_accounts_are_isolated(make_admission: MakeAdmission) -> None:
    admission = make_admission(slot_wait_seconds=0, global_concurrency=100)
    busy = make_caller()
    # Same account, 50 approvals: the account cap of 2 binds, not the approvals' budgets.
    callers = [make_caller(account_id=busy.account_id) for _ in range(50)]
    results = await asyncio.gather(*(_try(admission, i, callers) for i in range(50)))
    grants = [r for r in results if isinstance(r, Grant)]
    assert len(grants) == 2
    assert {r.limit for r in results if isinstance(r, LimitExceeded)} == {"account"}
    # Another account is not affected by the busy one.
    other = await admission.acquire("other-1", make_caller())
    assert other.shared
    for grant in [*grants, other]:
        await admission.release(grant)


async def test_each_replica_admits_its_global_cap_and_shares_the_account_cap(
    make_admission: MakeAdmission,
) -> None:
    """`global` is per replica: three replicas admit 4 each. The account cap holds across
    them: one account's calls spread over the three are admitted 2 at a time."""
    replicas = [make_admission(slot_wait_seconds=0) for _ in range(3)]
    callers = [make_caller() for _ in range(60)]

    async def one(i: int) -> Grant | LimitExceeded:
        return await _try(replicas[i % 3], i, callers)

    results = await asyncio.gather(*(one(i) for i in range(60)))
    grants = [r for r in results if isinstance(r, Grant)]
    assert len(grants) == 12
    assert {r.limit for r in results if isinstance(r, LimitExceeded)} == {"global"}
    for index, result in enumerate(results):
        if isinstance(result, Grant):
            await replicas[index % 3].release(result)

    # (Replicas with room to spare: only the account cap binds.)
    replicas = [make_admission(slot_wait_seconds=0, global_concurrency=100) for _ in range(3)]
    busy = make_caller()
    same = [make_caller(account_id=busy.account_id) for _ in range(30)]
    results = await asyncio.gather(*(_try(replicas[i % 3], i, same) for i in range(30)))
    assert sum(isinstance(r, Grant) for r in results) == 2
    assert {r.limit for r in results if isinstance(r, LimitExceeded)} == {"account"}
    for index, result in enumerate(results):
        if isinstance(result, Grant):
            await replicas[index % 3].release(result)


async def test_rate_budget_refusal_and_exact_retry_after(make_admission: MakeAdmission) -> None:
    admission = make_admission(approval_per_minute=3)  # one token every 20 s
    caller = make_caller()
    for i in range(3):
        grant = await admission.acquire(f"rate-{i}", caller)
        assert grant.headers()["RateLimit"] == f'"approval";r={2 - i};t=20'
        assert grant.headers()["RateLimit-Policy"] == '"approval";q=3;w=60'
        await admission.release(grant)
    started = time.monotonic()
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("rate-3", caller)
    err = refused.value
    assert err.limit == "approval"
    # The first token went ~0 s ago; the next one is due 20 s after it, rounded up.
    assert err.retry_after_seconds == math.ceil(20 - (time.monotonic() - started))
    assert err.retry_after_seconds == 20
    assert err.headers["RateLimit"] == '"approval";r=0;t=20'
    # Another approval of the same account has its own bucket.
    other = await admission.acquire("rate-other", make_caller(account_id=caller.account_id))
    await admission.release(other)


async def test_rate_budget_refills_continuously(make_admission: MakeAdmission) -> None:
    admission = make_admission(approval_per_minute=120, global_concurrency=200)  # 2 a second
    caller = make_caller()
    for i in range(120):
        await admission.release(await admission.acquire(f"fill-{i}", caller))
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("fill-120", caller)
    assert refused.value.limit == "approval"
    assert refused.value.retry_after_seconds == 1
    await asyncio.sleep(0.55)
    grant = await admission.acquire("fill-121", caller)  # one token came back
    await admission.release(grant)
    with pytest.raises(LimitExceeded):
        await admission.acquire("fill-122", caller)


async def test_daily_budget_is_shared_by_the_accounts_approvals(
    make_admission: MakeAdmission, redis_client: aioredis.Redis
) -> None:
    admission = make_admission(account_per_day=3)
    first = make_caller()
    second = make_caller(account_id=first.account_id)  # a second approval, same account
    for rid, caller in (("d-1", first), ("d-2", first), ("d-3", second)):
        grant = await admission.acquire(rid, caller)
        await admission.release(grant)
    assert '"account_daily";r=0;' in grant.headers()["RateLimit"]
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("d-4", second)
    seconds, _ = await _redis_time(redis_client)
    until_midnight = 86400 - seconds % 86400
    err = refused.value
    assert err.limit == "account_daily"
    assert abs(err.retry_after_seconds - until_midnight) <= 2
    assert '"account_daily";q=3;w=86400' in err.headers["RateLimit-Policy"]
    # Adding approvals never adds budget; another account has its own.
    with pytest.raises(LimitExceeded):
        await admission.acquire("d-5", make_caller(account_id=first.account_id))
    await admission.release(await admission.acquire("d-6", make_caller()))


async def test_leases_expire_so_a_dead_replica_leaks_nothing(make_admission: MakeAdmission) -> None:
    # A replica SIGKILLed while holding an account's slots: its Admission simply disappears.
    settings = {"request_deadline_seconds": 0.3, "lease_grace_seconds": 0, "slot_wait_seconds": 0}
    dead = make_admission(**settings)
    account = make_caller().account_id
    for i in range(2):
        await dead.acquire(f"dead-{i}", make_caller(account_id=account))
    alive = make_admission(**settings)
    with pytest.raises(LimitExceeded) as refused:
        await alive.acquire("alive-0", make_caller(account_id=account))
    assert refused.value.limit == "account"
    await asyncio.sleep(0.35)
    grant = await alive.acquire("alive-1", make_caller(account_id=account))
    assert grant.shared
    await alive.release(grant)


async def test_release_is_idempotent_and_frees_only_its_own_slot(
    make_admission: MakeAdmission, redis_client: aioredis.Redis
) -> None:
    admission = make_admission(account_concurrency=4)
    account = make_caller().account_id
    grants = [
        await admission.acquire(f"idem-{i}", make_caller(account_id=account)) for i in range(4)
    ]
    leases = admission.keys(grants[0].account_id, grants[0].approval_id)[0]
    assert await redis_client.zcard(leases) == 4
    await admission.release(grants[0])
    await admission.release(grants[0])
    await asyncio.gather(admission.release(grants[1]), admission.release(grants[1]))
    assert await redis_client.zcard(leases) == 2
    # A grant released after its lease expired is harmless too.
    await admission.release(grants[2])
    await admission.release(grants[3])
    assert await redis_client.zcard(leases) == 0


async def test_clock_skew_of_the_replica_cannot_matter(
    make_admission: MakeAdmission, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The failure: a replica 40 s fast let 10 requests through a cap of 4.
    fast = make_admission(account_concurrency=4, slot_wait_seconds=0)
    slow = make_admission(account_concurrency=4, slot_wait_seconds=0)
    real_time = time.time
    account = make_caller().account_id
    callers = [make_caller(account_id=account) for _ in range(10)]
    results: list[Grant | LimitExceeded] = []
    for i in range(10):
        skew = 40.0 if i % 2 else -40.0
        monkeypatch.setattr(time, "time", lambda skew=skew: real_time() + skew)
        results.append(await _try(fast if i % 2 else slow, i, callers))
    monkeypatch.setattr(time, "time", real_time)
    grants = [r for r in results if isinstance(r, Grant)]
    assert len(grants) == 4
    # Every lease is scored by Redis TIME (+ deadline + grace), not by either replica's clock.
    seconds, micros = await _redis_time(redis_client)
    redis_now_ms = seconds * 1000 + micros // 1000
    key = fast.keys(grants[0].account_id, grants[0].approval_id)[0]
    scores = await redis_client.zrange(key, 0, -1, withscores=True)
    for entry in scores:
        score = float(entry[1])
        assert abs(score - (redis_now_ms + 35_000)) < 2_000


async def test_refusal_takes_nothing(make_admission: MakeAdmission) -> None:
    admission = make_admission(approval_per_minute=2)
    caller = make_caller()
    held = [await admission.acquire(f"held-{i}", caller) for i in range(2)]
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("held-2", caller)
    # The account cap (2) and the rate (2 a minute) are both reached: the longer wait wins.
    assert refused.value.limit == "approval"
    for grant in held:
        await admission.release(grant)
    other = make_caller(account_id=caller.account_id)
    grants = [await admission.acquire(f"o-{i}", other) for i in range(2)]
    assert grants[-1].budget.remaining == 0
    for grant in grants:
        await admission.release(grant)


async def test_release_soon_is_in_place_before_the_next_admission(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    """A release is queued at once (the transport's wait for it is then only a wait): it
    reaches Redis before the same caller's next admission on this replica, even unawaited,
    so a caller at its cap is admitted again at once."""
    admission = make_admission(account_concurrency=1)
    caller = make_caller()
    for turn in range(20):
        grant = await admission.acquire(f"soon-{turn}", caller)
        pending = admission.release_soon(grant)
        assert pending is not None and not pending.done()  # nothing was awaited
        assert admission.release_soon(grant) is None  # idempotent
    last = await admission.acquire("soon-last", caller)
    await admission.release(last)
    releases = [error for op, _, error in metrics.recorded_redis_calls if op == "release"]
    assert releases == [False] * 21  # each reply handled when it came, none failed


async def test_a_spent_rate_budget_is_refused_here_until_its_next_token(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    """Until the next token is due the script would refuse the approval again: this replica
    answers those 429s without asking Redis, with the same limit, Retry-After and budget."""
    admission = make_admission(approval_per_minute=120, global_concurrency=200)  # 2 a second
    caller = make_caller()
    for i in range(120):
        await admission.release(await admission.acquire(f"memo-{i}", caller))
    with pytest.raises(LimitExceeded):
        await admission.acquire("memo-120", caller)
    asked = sum(op == "admit" for op, _, _ in metrics.recorded_redis_calls)
    for i in range(50):
        with pytest.raises(LimitExceeded) as refused:
            await admission.acquire(f"memo-again-{i}", caller)
        assert refused.value.limit == "approval" and refused.value.retry_after_seconds == 1
        assert refused.value.headers["RateLimit"] == '"approval";r=0;t=1'
    assert sum(op == "admit" for op, _, _ in metrics.recorded_redis_calls) == asked
    assert metrics.recorded_refused.count("approval") == 51  # every refusal still counted
    # Another approval of the account is not affected; the spent one is admitted once due.
    await admission.release(
        await admission.acquire("memo-other", make_caller(account_id=caller.account_id))
    )
    await asyncio.sleep(0.55)
    await admission.release(await admission.acquire("memo-due", caller))
