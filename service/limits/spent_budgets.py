"""Approvals whose rate budget is spent, remembered by the replica that was told so.

Once admit.lua refuses an approval for its rate budget, it says when the next token is due;
until then Redis would refuse that approval again whichever replica asks (tokens only come
back at the rate), so this replica answers those 429s itself, without the round trip
(docs/decisions/limits.md). Its text and headers change once a second: they are made once
a second. Each refusal is still counted.
"""

from __future__ import annotations

import math
import time
from uuid import UUID

from service.errors import LimitExceeded
from service.limits.budget import APPROVAL, Budget, Decision
from service.limits.refusals import Refusals
from service.observability.metrics.app_metrics import Metrics

# How many approvals are remembered before starting over.
_KNOWN = 4096


class _Spent:
    """An approval refused for its rate budget: when (monotonic) its next token is due,
    the script's decision and when it was made, and the refusal last shown for it."""

    __slots__ = ("decided", "decision", "shown", "shown_retry", "until")

    def __init__(self, decided: float, decision: Decision) -> None:
        self.decided = decided
        self.decision = decision
        self.until = decided + decision.retry_ms / 1000
        self.shown: LimitExceeded | None = None
        self.shown_retry = 0


class SpentBudgets:
    def __init__(self, refusals: Refusals, metrics: Metrics) -> None:
        self._refusals = refusals
        self._metrics = metrics
        self._spent: dict[UUID, _Spent] = {}

    def remember(self, approval_id: UUID, decision: Decision) -> None:
        """The shared limiter refused `approval_id` for its rate budget (`decision`)."""
        if len(self._spent) >= _KNOWN:
            self._spent.clear()
        self._spent[approval_id] = _Spent(time.monotonic(), decision)

    def holds(self, approval_id: UUID) -> bool:
        """Whether `approval_id` is known to be spent now (nothing counted, nothing made)."""
        spent = self._spent.get(approval_id)
        return spent is not None and time.monotonic() < spent.until

    def refusal(self, approval_id: UUID) -> LimitExceeded | None:
        """The 429 the shared limiter would answer now for `approval_id`, or None when it
        is not known to be spent (or its next token is due: then Redis decides again)."""
        spent = self._spent.get(approval_id)
        if spent is None:
            return None
        now = time.monotonic()
        if now >= spent.until:
            del self._spent[approval_id]
            return None
        retry = max(1, math.ceil(spent.until - now))
        if retry != spent.shown_retry:
            budget = spent.decision.budget
            elapsed = now - spent.decided
            later = Decision(
                False,
                Budget(
                    budget.per_minute,
                    budget.tokens + elapsed * budget.per_minute / 60.0,
                    budget.daily_cap,
                    budget.daily_used,
                    max(0.0, budget.daily_reset_seconds - elapsed),
                ),
                APPROVAL,
                round((spent.until - now) * 1000),
            )
            spent.shown = self._refusals.refusal(later, True, count=False)
            spent.shown_retry = retry
        assert spent.shown is not None
        self._metrics.limit_refused(APPROVAL)
        shown = spent.shown
        return LimitExceeded(
            APPROVAL, shown.retry_after_seconds, shown.message, headers=shown.headers
        )
