"""The 429s of the admission: a refusal made from a decision, the refusal of a shared limiter
that did not answer, and their messages. Each refusal is counted here
(`Metrics.limit_refused`), so the transport must not count it again."""

from __future__ import annotations

from service.edge.headers import RATE_LIMIT
from service.errors import LimitExceeded
from service.limits.budget import (
    ACCOUNT,
    ACCOUNT_DAILY,
    APPROVAL,
    APPROVAL_POLICY,
    GLOBAL,
    Budget,
    Decision,
    concurrency_hint,
)
from service.limits.local_limiter import LocalLimiter
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits


class Refusals:
    def __init__(self, limits: Limits, local: LocalLimiter, metrics: Metrics) -> None:
        self.limits = limits
        self._local = local
        self._metrics = metrics

    def refusal(self, decision: Decision, shared: bool, *, count: bool = True) -> LimitExceeded:
        """The 429 of a refused decision, by the shared limiter or this process's."""
        limit = decision.limit or GLOBAL
        if count:
            self._metrics.limit_refused(limit)
        return LimitExceeded(
            limit,
            decision.retry_after_seconds(),
            _message(
                limit, decision.budget, self.limits.global_concurrency, self._account_cap(shared)
            ),
            headers=decision.budget.headers(),
        )

    def replica_full(self, capacity: int) -> LimitExceeded:
        """The 429 of a replica whose slots stayed taken (the global cap, per replica): no
        shared budget was read, so `RateLimit-Policy` names the quotas and `RateLimit`
        promises nothing before the hint."""
        self._metrics.limit_refused(GLOBAL)
        retry = concurrency_hint()
        headers = self._unknown_budget(retry)
        message = f"This replica is handling {capacity} requests at once."
        if capacity < self.limits.global_concurrency:
            message = message[:-1] + " (its share of the fleet's limit)."
        return LimitExceeded(GLOBAL, retry, message, headers=headers)

    def account_full(self, shared: bool) -> LimitExceeded:
        """The 429 of a request whose wait behind its account's requests ended with no
        replica slot free for its last try: refused for the account's cap, the limit it
        waited for (the replica's slots are then mostly its account's last tries, each
        asking Redis); no budget was read, as with `replica_full`."""
        self._metrics.limit_refused(ACCOUNT)
        retry = concurrency_hint()
        message = _account_busy(self._account_cap(shared))
        return LimitExceeded(ACCOUNT, retry, message, headers=self._unknown_budget(retry))

    def _account_cap(self, shared: bool) -> int:
        return self.limits.account_concurrency if shared else self._local.account_cap

    def _unknown_budget(self, retry: int) -> dict[str, str]:
        # The budget is unknown; what holds is "nothing more until the hint has passed".
        headers = Budget(
            self.limits.approval_per_minute, 0.0, self.limits.account_per_day
        ).headers()
        headers[RATE_LIMIT] = f'"{APPROVAL_POLICY}";r=0;t={retry}'
        return headers

    def unanswered(self) -> LimitExceeded:
        """The 429 of one failed script call while Redis is believed up."""
        self._metrics.limit_refused(GLOBAL)
        retry = concurrency_hint()
        headers = self._unknown_budget(retry)
        return LimitExceeded(
            GLOBAL, retry, "The shared limits did not answer in time.", headers=headers
        )


def _message(limit: str, budget: Budget, global_cap: int, account_cap: int) -> str:
    if limit == ACCOUNT_DAILY:
        return (
            f"This account has used its {budget.daily_cap} requests for today;"
            " the budget resets at 00:00 UTC."
        )
    if limit == APPROVAL:
        return f"This approval has used its {budget.per_minute} requests a minute."
    if limit == ACCOUNT:
        return _account_busy(account_cap)
    return f"This replica is handling {global_cap} requests at once."


def _account_busy(cap: int) -> str:
    return f"This account already has {cap} requests in progress."
