"""Overlapped admission (`Admission.begin` / `settle` / `abandon`) against the machine's
Redis: the same decisions as `acquire`, declined when a refusal is likely, and nothing held
by a request that ends before it settles."""

from __future__ import annotations

import asyncio
import time

import pytest

from service.errors import LimitExceeded
from service.limits.admission import Admission
from service.limits.recent_refusals import RecentRefusals
from tests.limits.conftest import MakeAdmission, RecordingMetrics, make_caller, wait_for

pytestmark = pytest.mark.alone  # leases and holds timed to fractions of a second


async def _fills(admission: Admission, count: int) -> bool:
    """Whether `count` fresh accounts are all admitted now (the global cap is free)."""
    grants = []
    try:
        for i in range(count):
            grants.append(await admission.acquire(f"fill-{i}-{time.monotonic()}", make_caller()))
        return True
    except LimitExceeded:
        return False
    finally:
        for grant in grants:
            await admission.release(grant)


async def test_settle_admits_and_refuses_as_acquire_does(make_admission: MakeAdmission) -> None:
    seen = []
    for overlap in (True, False):
        admission = make_admission(account_concurrency=1, admission_overlap=overlap)
        caller = make_caller()
        first = admission.begin("first", caller)
        assert (first is not None) == overlap
        grant = await (admission.settle(first) if first else admission.acquire("first", caller))
        second = admission.begin("second", caller)
        with pytest.raises(LimitExceeded) as refused:
            await (admission.settle(second) if second else admission.acquire("second", caller))
        err = refused.value
        seen.append((grant.shared, grant.headers(), err.limit, err.message, err.headers))
        await admission.release(grant)
    assert seen[0] == seen[1]
    assert seen[0][2:4] == ("account", "This account already has 1 requests in progress.")


async def test_begin_declines_after_a_refusal_of_the_same_account_or_everyone(
    make_admission: MakeAdmission,
) -> None:
    admission = make_admission(account_concurrency=1, admission_overlap=True)
    caller = make_caller()
    early = admission.begin("a", caller)
    assert early is not None
    grant = await admission.settle(early)
    refused = admission.begin("b", caller)
    assert refused is not None  # nothing refused yet: overlapped
    with pytest.raises(LimitExceeded):
        await admission.settle(refused)
    # The account was refused a moment ago: its next request waits for its admission.
    assert admission.begin("c", make_caller(account_id=caller.account_id)) is None
    other = admission.begin("d", make_caller())  # another account still overlaps
    assert other is not None
    await admission.release(await admission.settle(other))
    await admission.release(grant)


async def test_begin_declines_while_the_approval_is_spent(make_admission: MakeAdmission) -> None:
    admission = make_admission(approval_per_minute=1, admission_overlap=True)
    caller = make_caller()
    await admission.release(await admission.acquire("only", caller))
    with pytest.raises(LimitExceeded):
        await admission.acquire("spent", caller)
    assert admission.begin("again", caller) is None
    with pytest.raises(LimitExceeded) as refused:
        await admission.acquire("again", caller)
    assert refused.value.limit == "approval"


def test_recent_refusals_hold_then_forget() -> None:
    recent = RecentRefusals(hold_seconds=0.05)
    caller = make_caller()
    assert not recent.refused(caller)
    recent.remember(caller, "approval")
    assert recent.refused(caller)
    assert not recent.refused(make_caller(account_id=caller.account_id))
    recent.remember(caller, "account_daily")
    assert recent.refused(make_caller(account_id=caller.account_id))
    recent.remember(caller, None)  # the limiter did not answer: everyone
    assert recent.refused(make_caller())
    time.sleep(0.06)
    assert not recent.refused(caller) and not recent.refused(make_caller())


async def test_overlap_off_and_no_redis_never_begin(make_admission: MakeAdmission) -> None:
    assert make_admission().begin("x", make_caller()) is None  # off by default
    assert make_admission(url=None, admission_overlap=True).begin("y", make_caller()) is None


async def test_abandon_before_the_reply_leaves_no_slot_taken(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    """Requests cancelled (or past their deadline) before they settle: whether admit.lua ran
    before or after, their slots come back (compensation or release)."""
    admission = make_admission(global_concurrency=4, admission_overlap=True)
    waiting = [admission.begin(f"gone-{i}", make_caller()) for i in range(4)]
    assert all(w is not None for w in waiting)
    for early in waiting:
        assert early is not None and not early.reply.done()
        admission.abandon(early)
    await wait_for(lambda: _fills(admission, 4))


async def test_abandon_after_the_reply_releases_the_admitted(
    make_admission: MakeAdmission, metrics: RecordingMetrics
) -> None:
    admission = make_admission(global_concurrency=4, admission_overlap=True)
    landed = [admission.begin(f"late-{i}", make_caller()) for i in range(4)]
    for early in landed:
        assert early is not None
        await asyncio.wait([early.reply])
    assert not await _fills(admission, 1)  # the four hold every slot
    for early in landed:
        assert early is not None
        admission.abandon(early)
    await wait_for(lambda: _fills(admission, 4))
    admits = [error for op, _, error in metrics.recorded_redis_calls if op == "admit"]
    assert admits.count(False) >= 4  # each landed reply was counted once, none failed
