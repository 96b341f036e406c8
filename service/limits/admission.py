"""Admission: every request takes its limits before its answer leaves, shared by all
replicas.

`Admission.acquire(request_id, caller)` returns a `Grant` or raises `LimitExceeded`;
`Admission.release(grant)` frees its concurrency slots (idempotent). With Redis the whole
check-and-take is one Lua script (admit.lua, EVALSHA) on Redis time; without Redis, or
while the circuit breaker holds Redis open, a per-process limiter with this replica's share
of each cap answers instead (docs/limits.md).

`begin` and `settle` are `acquire` in two steps: the script call is sent at once and the
request's work runs while its reply is on the way; the reply decides before the answer
leaves, and a refusal replaces the answer (docs/decisions/limits.md, Overlapped
admission). `begin` declines (the caller then uses `acquire`) whenever a refusal is likely.

Beside it: shared.py makes the Redis calls (script_calls.py packs them, pipeline.py sends them),
refusals.py makes the 429s, spent.py remembers the approvals whose rate budget is spent and
recent.py who was refused a moment ago. Every key of one script call shares one hash slot
(`{limits}` hash tag), because the script takes the global slot and the account's slot in
the same atomic step; see docs/decisions/limits.md.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from service.auth.caller import Caller
from service.limits.breaker import CircuitBreaker, State
from service.limits.budget import APPROVAL, Budget, Decision
from service.limits.local import LocalLimiter
from service.limits.pipeline import ScriptPipeline
from service.limits.recent import RecentRefusals
from service.limits.redis_client import REDIS_TIMEOUT_SECONDS, RedisClient
from service.limits.refusals import Refusals
from service.limits.script_calls import ScriptCalls
from service.limits.shared import UNANSWERED, Admitting, SharedLimiter
from service.limits.spent import SpentBudgets
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits


@dataclass(eq=False, slots=True)
class Grant:
    """One admitted request's hold on the limits, until `Admission.release`."""

    request_id: str
    account_id: UUID
    approval_id: UUID
    shared: bool  # True: leases in Redis; False: in this process's limiter
    budget: Budget
    released: bool = False

    def headers(self) -> dict[str, str]:
        """`RateLimit-Policy` / `RateLimit`: the approval's remaining budget."""
        return self.budget.headers()


class Admission:
    def __init__(
        self,
        limits: Limits,
        *,
        redis: RedisClient | None,
        key_prefix: str,
        metrics: Metrics,
        breaker: CircuitBreaker | None = None,
        timeout_seconds: float = REDIS_TIMEOUT_SECONDS,
    ) -> None:
        self.limits = limits
        base = f"{key_prefix}{{limits}}:"
        self._breaker = breaker or CircuitBreaker()
        lease_seconds = limits.request_deadline_seconds + limits.lease_grace_seconds
        self._calls = ScriptCalls(base, limits, round(lease_seconds * 1000))
        self._local = LocalLimiter.share(limits, limits.expected_replicas)
        self._refusals = Refusals(limits, self._local, metrics)
        # Approvals the shared limiter refused for their rate budget (spent.py).
        self._spent = SpentBudgets(self._refusals, metrics)
        self._recent = RecentRefusals()
        self._shared = (
            SharedLimiter(
                redis,
                self._calls,
                metrics=metrics,
                breaker=self._breaker,
                local=self._local,
                timeout_seconds=timeout_seconds,
                slot_key=f"{base}global",
            )
            if redis is not None
            else None
        )

    @property
    def degraded(self) -> bool:
        """True while Redis is configured but the per-process limiter answers instead."""
        return self._shared is not None and self._shared.degraded

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def pipeline(self) -> ScriptPipeline | None:
        return None if self._shared is None else self._shared.pipeline

    @property
    def local(self) -> LocalLimiter:
        return self._local

    def keys(self, account_id: UUID, approval_id: UUID) -> list[str]:
        """The five keys of one admission, all in one hash slot (script_calls.py)."""
        return self._calls.keys(account_id, approval_id)

    async def acquire(self, request_id: str, caller: Caller) -> Grant:
        refusal = self._spent.refusal(caller.approval_id)
        if refusal is not None:
            raise refusal
        answer: Decision | object | None = None
        shared = self._shared
        if shared is not None:
            if self._breaker.state is State.CLOSED:
                answer = await shared.decision(shared.submit(request_id, caller))
            else:
                # Redis is down: this request is answered by the per-process limits. Whether
                # Redis is back is asked by a background probe, never by a user's request,
                # so an outage costs no refusals beyond the switch-over itself.
                shared.probe_when_due()
        return self._decided(answer, request_id, caller)

    def begin(self, request_id: str, caller: Caller) -> Admitting | None:
        """Send this request's admission now, for `settle` to decide once its work is done;
        None when the request should wait for its admission first (`acquire`): overlap is
        off, there is no Redis or the breaker is not closed, the approval's budget is
        spent, or the shared limiter refused this approval, its account or the service
        a moment ago (recent.py)."""
        shared = self._shared
        if (
            not self.limits.admission_overlap
            or shared is None
            or self._breaker.state is not State.CLOSED
            or self._recent.refused(caller)
            or self._spent.holds(caller.approval_id)
        ):
            return None
        return shared.submit(request_id, caller)

    async def settle(self, admitting: Admitting) -> Grant:
        """`begin`'s admission decided: a `Grant`, or `LimitExceeded` as `acquire` raises."""
        assert self._shared is not None
        answer = await self._shared.decision(admitting)
        return self._decided(answer, admitting.request_id, admitting.caller)

    def abandon(self, admitting: Admitting) -> None:
        """`begin`'s request ended before `settle` (cancelled, past its deadline): what the
        script decided is undone (shared.py)."""
        if self._shared is not None:
            self._shared.abandon(admitting)

    def _decided(self, answer: Decision | object | None, request_id: str, caller: Caller) -> Grant:
        if answer is UNANSWERED:
            self._refused_recently(caller, None)
            raise self._refusals.unanswered()
        if isinstance(answer, Decision):
            decision, shared = answer, True
        else:
            decision = self._local.acquire(request_id, caller.account_id, caller.approval_id)
            shared = False
        if not decision.admitted:
            if shared:
                self._refused_recently(caller, decision.limit)
                if decision.limit == APPROVAL and decision.retry_ms > 0:
                    self._spent.remember(caller.approval_id, decision)
            raise self._refusals.refusal(decision, shared)
        return Grant(request_id, caller.account_id, caller.approval_id, shared, decision.budget)

    def _refused_recently(self, caller: Caller, limit: str | None) -> None:
        if self.limits.admission_overlap:  # the hint is `begin`'s alone (recent.py)
            self._recent.remember(caller, limit)

    async def release(self, grant: Grant) -> None:
        """`release_soon`, then wait for Redis to confirm it: what the transport does
        before answering. The pipeline bounds the wait (its calls settle within their
        bound) and sends the release even if this wait is cancelled."""
        pending = self.release_soon(grant)
        if pending is not None:
            try:
                await pending
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():
                    raise  # this request was cancelled, not only the release's reply
            except Exception:  # handled by shared.py's callback; the lease bounds it
                pass

    def release_soon(self, grant: Grant) -> asyncio.Future[Any] | None:
        """Free the grant's slots (idempotent): the release is queued on the pipeline at
        once, so it reaches Redis before any later admission made by this replica.
        Returns the pending reply, or None when nothing is left to wait for."""
        if grant.released:
            return None
        grant.released = True
        if not grant.shared:
            self._local.release(grant.request_id)
            return None
        if self._shared is None:
            return None
        return self._shared.release_soon(grant.request_id, grant.account_id, grant.approval_id)

    async def warm_up(self) -> None:
        """Load both scripts before the first request (shared.py)."""
        if self._shared is not None:
            await self._shared.warm_up()

    async def check(self, operation: str = "probe") -> bool:
        """A real script call proving the shared limiter works (shared.py); False without
        Redis."""
        return self._shared is not None and await self._shared.check(operation)

    async def shared_state(self) -> str:
        """What /readyz reports: `ok` when the shared limiter answered a check just now,
        `degraded` otherwise (per-process limits apply, or will if Redis keeps failing),
        `not_configured` without Redis. The check runs whenever the breaker lets a call
        through (always while closed: an idle replica finds an outage here too)."""
        if self._shared is None:
            return "not_configured"
        answered = self._breaker.allow() and await self._shared.check("health")
        return "ok" if answered and not self.degraded else "degraded"

    async def close(self) -> None:
        if self._shared is not None:
            await self._shared.close()
