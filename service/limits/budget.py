"""An admission decision and the budget it leaves, rendered as RateLimit headers.

Both limiters (shared in Redis, per process) answer with a `Decision`; `Budget.headers`
renders what is left after the IETF httpapi draft (draft-ietf-httpapi-ratelimit-headers,
structured fields; docs/decisions/limits.md, "Answers").
"""

from __future__ import annotations

import math
import random

import msgspec

from service.edge.headers import RATE_LIMIT, RATE_LIMIT_POLICY

APPROVAL_POLICY = "approval"
DAILY_POLICY = "account_daily"

# Limit names as the wire and the metrics carry them.
GLOBAL = "global"
ACCOUNT = "account"
APPROVAL = "approval"
ACCOUNT_DAILY = "account_daily"
LIMITS = (GLOBAL, ACCOUNT, APPROVAL, ACCOUNT_DAILY)

DAY_SECONDS = 86400


class Budget(msgspec.Struct, frozen=True):
    """What an approval (and its account, for the daily budget) has left right now."""

    per_minute: int
    tokens: float
    daily_cap: int | None = None
    daily_used: int = 0
    daily_reset_seconds: float = DAY_SECONDS

    @property
    def remaining(self) -> int:
        return max(0, math.floor(self.tokens + 1e-9))

    def seconds_to_next_token(self) -> int:
        """Whole seconds until `remaining` grows by one (a full bucket: one refill step)."""
        rate = self.per_minute / 60.0
        if self.tokens >= self.per_minute:
            deficit = 1.0
        else:
            deficit = min(float(self.per_minute), self.remaining + 1.0) - self.tokens
        return max(1, math.ceil(deficit / rate - 1e-9))

    def headers(self) -> dict[str, str]:
        """The two headers, for example:

            RateLimit-Policy: "approval";q=60;w=60, "account_daily";q=1000;w=86400
            RateLimit: "approval";r=59;t=1, "account_daily";r=999;t=43200

        `r` is what is available now; `t` the whole seconds until that number next grows
        (one more token for the per-minute bucket, the daily reset for the daily budget), so
        on a refusal by the rate budget `t` equals `Retry-After`."""
        policy = f'"{APPROVAL_POLICY}";q={self.per_minute};w=60'
        state = f'"{APPROVAL_POLICY}";r={self.remaining};t={self.seconds_to_next_token()}'
        if self.daily_cap is not None:
            left = max(0, self.daily_cap - self.daily_used)
            reset = max(1, math.ceil(self.daily_reset_seconds))
            policy += f', "{DAILY_POLICY}";q={self.daily_cap};w={DAY_SECONDS}'
            state += f', "{DAILY_POLICY}";r={left};t={reset}'
        return {RATE_LIMIT_POLICY: policy, RATE_LIMIT: state}


class Decision(msgspec.Struct, frozen=True):
    """One admission answer: admitted, or refused by `limit` for `retry_ms` (0: a hint)."""

    admitted: bool
    budget: Budget
    limit: str | None = None
    retry_ms: int = 0

    def retry_after_seconds(self) -> int:
        """Retry-After: exact for the rate and daily budgets (rounded up, at least 1); for a
        concurrency cap a jittered hint of 1–2 s, because slots are normally freed within
        milliseconds and the lease (the crash bound) is never the advertised wait."""
        if self.limit in (GLOBAL, ACCOUNT):
            return concurrency_hint()
        return max(1, math.ceil(self.retry_ms / 1000))


def concurrency_hint() -> int:
    """Retry-After for a busy slot: 1 or 2 s at random, so refused clients spread out."""
    return random.choice((1, 2))
