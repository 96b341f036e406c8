"""The per-process limiter: the same limits as the Redis script (the account's concurrency,
the approval's rate, the account's daily budget), in one process's memory.

It is the normal mode without ELOVA_REDIS_URL and the fallback while Redis is unreachable.
Its caps are this replica's share of each limit (built by `LocalLimiter.share`), so that
the replicas together stay close to the configured totals. (The global cap is per replica
in every mode: replica_slots.py.) Time is this process's
monotonic clock (nothing is shared, so skew cannot matter); the daily budget resets at
00:00 UTC by the wall clock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from service.limits.budget import (
    ACCOUNT,
    ACCOUNT_DAILY,
    APPROVAL,
    DAY_SECONDS,
    Budget,
    Decision,
)
from service.settings.limits import Limits

# Past this many remembered approvals, full buckets (indistinguishable from absent) go.
_PRUNE_AT = 10_000


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


@dataclass(slots=True)
class _Lease:
    account_id: UUID
    expires_at: float


class LocalLimiter:
    def __init__(
        self,
        *,
        account_cap: int,
        per_minute: int,
        daily_cap: int | None,
        lease_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.account_cap = account_cap
        self.per_minute = per_minute
        self.daily_cap = daily_cap
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._wall = wall_clock
        self._leases: dict[str, _Lease] = {}
        self._by_account: dict[UUID, int] = {}
        self._buckets: dict[UUID, _Bucket] = {}
        self._daily: dict[UUID, tuple[int, int]] = {}

    @classmethod
    def share(cls, limits: Limits, replicas: int) -> LocalLimiter:
        """This replica's share of each limit: the cap divided by the replicas, at least 1."""

        def part(cap: int) -> int:
            return max(1, cap // replicas)

        return cls(
            account_cap=part(limits.account_concurrency),
            per_minute=part(limits.approval_per_minute),
            daily_cap=None if limits.account_per_day is None else part(limits.account_per_day),
            lease_seconds=limits.request_deadline_seconds + limits.lease_grace_seconds,
        )

    @property
    def in_flight(self) -> int:
        return len(self._leases)

    def acquire(self, request_id: str, account_id: UUID, approval_id: UUID) -> Decision:
        now = self._clock()
        self._purge(now)
        bucket = self._refilled(approval_id, now)
        day, reset = divmod(self._wall(), DAY_SECONDS)
        reset_seconds = DAY_SECONDS - reset
        used = self._daily_used(account_id, int(day))

        def refuse(limit: str, retry_ms: int) -> Decision:
            budget = self._budget(bucket.tokens, used, reset_seconds)
            return Decision(False, budget, limit, retry_ms)

        if self.daily_cap is not None and used >= self.daily_cap:
            return refuse(ACCOUNT_DAILY, math.ceil(reset_seconds * 1000))
        if bucket.tokens < 1:
            rate = self.per_minute / 60.0
            return refuse(APPROVAL, math.ceil((1 - bucket.tokens) / rate * 1000))
        if self._by_account.get(account_id, 0) >= self.account_cap:
            return refuse(ACCOUNT, 0)

        self._leases[request_id] = _Lease(account_id, now + self.lease_seconds)
        self._by_account[account_id] = self._by_account.get(account_id, 0) + 1
        bucket.tokens -= 1
        if self.daily_cap is not None:
            used += 1
            self._daily[account_id] = (int(day), used)
        return Decision(True, self._budget(bucket.tokens, used, reset_seconds))

    def release(self, request_id: str) -> bool:
        """Free the request's slots; False when it held none (already released, expired)."""
        lease = self._leases.pop(request_id, None)
        if lease is None:
            return False
        left = self._by_account[lease.account_id] - 1
        if left:
            self._by_account[lease.account_id] = left
        else:
            del self._by_account[lease.account_id]
        return True

    def _budget(self, tokens: float, used: int, reset_seconds: float) -> Budget:
        return Budget(self.per_minute, tokens, self.daily_cap, used, reset_seconds)

    def _purge(self, now: float) -> None:
        # A request that outlives its lease (it should have been cancelled at the deadline)
        # stops counting, exactly as an expired lease in Redis does.
        expired = [rid for rid, lease in self._leases.items() if lease.expires_at <= now]
        for rid in expired:
            self.release(rid)

    def _refilled(self, approval_id: UUID, now: float) -> _Bucket:
        bucket = self._buckets.get(approval_id)
        if bucket is None:
            if len(self._buckets) >= _PRUNE_AT:
                self._prune(now)
            bucket = self._buckets[approval_id] = _Bucket(float(self.per_minute), now)
            return bucket
        refill = (now - bucket.at) * self.per_minute / 60.0
        bucket.tokens = min(float(self.per_minute), bucket.tokens + refill)
        bucket.at = now
        return bucket

    def _prune(self, now: float) -> None:
        rate = self.per_minute / 60.0
        full = [
            key
            for key, b in self._buckets.items()
            if b.tokens + (now - b.at) * rate >= self.per_minute
        ]
        for key in full:
            del self._buckets[key]
        today = int(self._wall() // DAY_SECONDS)
        for account in [a for a, (day, _) in self._daily.items() if day != today]:
            del self._daily[account]

    def _daily_used(self, account_id: UUID, day: int) -> int:
        if self.daily_cap is None:
            return 0
        stored_day, used = self._daily.get(account_id, (day, 0))
        return used if stored_day == day else 0
