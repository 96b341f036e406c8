"""Admission: every request takes its limits before its answer leaves.

`Admission` takes, in order, a slot of this replica's global cap (replica_slots.py,
fleet.py) and the account, approval and daily budgets every replica shares
(shared_limiter.py: one Redis script, packed by script_calls.py and sent by pipeline.py; a
per-process share while Redis is away), waiting briefly for a slot while a concurrency cap
refuses (slot_waits.py). refusals.py makes the 429s; spent_budgets.py and recent_refusals.py
remember who was refused. Why each limit lives where it does: docs/decisions/limits.md,
"Admission that grows with the fleet".
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from service.auth.caller import Caller
from service.edge.waiters import waiting
from service.errors import LimitExceeded
from service.limits.breaker import CircuitBreaker, State
from service.limits.budget import ACCOUNT, APPROVAL, Budget, Decision
from service.limits.fleet import FleetLease
from service.limits.local_limiter import LocalLimiter
from service.limits.pipeline import ScriptPipeline
from service.limits.recent_refusals import RecentRefusals
from service.limits.redis_client import REDIS_TIMEOUT_SECONDS, RedisClient
from service.limits.refusals import Refusals
from service.limits.replica_slots import ReplicaSlots
from service.limits.script_calls import ScriptCalls
from service.limits.shared_limiter import UNANSWERED, Admitting, SharedLimiter
from service.limits.slot_waits import SlotWait, SlotWaits
from service.limits.spent_budgets import SpentBudgets
from service.observability.metrics.app_metrics import Metrics
from service.settings.limits import Limits
from service.settings.redis import ACCOUNT_SLOT


@dataclass(eq=False, slots=True)
class Grant:
    """One admitted request's hold on the limits, until `Admission.release`."""

    request_id: str
    account_id: UUID
    approval_id: UUID
    shared: bool  # True: leases in Redis; False: in this process's limiter
    budget: Budget
    released: bool = False  # (it also holds one of the replica's slots until released)

    def headers(self) -> dict[str, str]:
        """`RateLimit-Policy` / `RateLimit`: the approval's remaining budget."""
        return self.budget.headers()


class Admission:
    """The limits of every request, taken before its answer leaves.

    `acquire(request_id, caller)` returns a `Grant` or raises `LimitExceeded`;
    `release(grant)` frees its concurrency slots (idempotent). The global cap is this
    replica's own (no Redis call; with ELOVA_LIMIT_FLEET_CONCURRENCY also bounded by the
    replica's leased block of the fleet). The account, approval and daily budgets hold across
    all replicas: with Redis the whole check-and-take is one Lua script (admit.lua, EVALSHA)
    on Redis time, on the account's own hash slot; without Redis, or while the circuit
    breaker holds Redis open, a per-process limiter with this replica's share of each budget
    answers instead (docs/limits.md).

    A request over a concurrency cap (`global`, `account`) waits a short, bounded time for a
    slot before its 429 (ELOVA_LIMIT_SLOT_WAIT_MS, at most half its deadline), holding
    nothing while it waits: in arrival order within its account, and for a replica slot in
    a fair queue across accounts (the account holding the fewest slots first).

    `begin` and `settle` are `acquire` in two steps: the script call is sent at once and the
    request's work runs while its reply is on the way; the reply decides before the answer
    leaves, and a refusal replaces the answer (docs/decisions/limits.md, "Overlapped
    admission"). `begin` declines (the caller then uses `acquire`) whenever a refusal or a
    wait is likely.
    """

    def __init__(
        self,
        limits: Limits,
        *,
        redis: RedisClient | None,
        key_prefix: str,
        metrics: Metrics,
        breaker: CircuitBreaker | None = None,
        timeout_seconds: float = REDIS_TIMEOUT_SECONDS,
        key_layout: str = ACCOUNT_SLOT,
    ) -> None:
        self.limits = limits
        base = f"{key_prefix}limits:"
        self._breaker = breaker or CircuitBreaker()
        lease_seconds = limits.request_deadline_seconds + limits.lease_grace_seconds
        self._calls = ScriptCalls(key_prefix, limits, round(lease_seconds * 1000), key_layout)
        self._local = LocalLimiter.share(limits, limits.expected_replicas)
        self.slots = ReplicaSlots(
            limits.global_concurrency, limits.waiters, limits.waiters_per_account
        )
        self._waits = SlotWaits(limits.waiters, limits.waiters_per_account)
        # The wait takes at most half the request's deadline: the rest is the work's, and a
        # refused request is answered its 429 well before the deadline's 503.
        self._wait_seconds = min(limits.slot_wait_seconds, limits.request_deadline_seconds / 2)
        self._metrics = metrics
        self._refusals = Refusals(limits, self._local, metrics)
        # Approvals the shared limiter refused for their rate budget (spent_budgets.py).
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
            )
            if redis is not None
            else None
        )
        self.fleet: FleetLease | None = None
        if limits.fleet_concurrency is not None:
            self.fleet = FleetLease(
                None if self._shared is None else self._shared.pipeline,
                self.slots,
                key_base=base,
                fleet_cap=limits.fleet_concurrency,
                fallback=max(1, limits.fleet_concurrency // limits.expected_replicas),
                hold_seconds=lease_seconds,
                metrics=metrics,
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
        """The four keys of one admission, all in the account's hash slot (script_calls.py)."""
        return self._calls.keys(account_id, approval_id)

    async def acquire(self, request_id: str, caller: Caller) -> Grant:
        refusal = self._spent.refusal(caller.approval_id)
        if refusal is not None:
            raise refusal
        return await self._admit(request_id, caller, None)

    async def _admit(
        self, request_id: str, caller: Caller, answer: Decision | object | None
    ) -> Grant:
        """Take a replica slot and the shared limits, waiting for a slot while a
        concurrency cap refuses and the wait lasts. With `answer` (`settle`), the first
        try's answer has come already, its slot taken."""
        started = asyncio.get_running_loop().time()
        until = started + self._wait_seconds
        wait: SlotWait | None = None
        final = False  # the wait is over: this try is the last
        try:
            if answer is None:
                wait, final = await self._behind(caller, until)
            waited = wait is not None
            while True:
                if answer is None:
                    waited = await self._slot_for_try(caller, started, until, final) or waited
                    answer = await self._ask(request_id, caller)
                try:
                    outcome = self._decided(answer, request_id, caller)
                except BaseException:
                    self.slots.give_back(caller.account_id)
                    raise
                answer = None
                if isinstance(outcome, Grant):
                    self._waited(waited, started, admitted=True)
                    return outcome
                self.slots.give_back(caller.account_id)
                decision, shared = outcome
                if decision.limit != ACCOUNT or final or self._wait_seconds <= 0:
                    self._waited(waited, started, admitted=False)
                    raise self._refused(decision, shared, caller)
                if wait is None:
                    wait = self._waits.join(caller.account_id)
                    if wait is None:  # too many wait already: refused at once
                        raise self._refused(decision, shared, caller)
                waited = True
                with waiting():
                    tried = await wait.next_try(until)
                if not tried:
                    self._waited(waited, started, admitted=False)
                    raise self._refused(decision, shared, caller)
        finally:
            if wait is not None:
                self._waits.leave(wait)

    async def _behind(self, caller: Caller, until: float) -> tuple[SlotWait | None, bool]:
        """When requests of this account already wait here, a place behind them, held
        until its turn, and whether the wait ended first (then one last try). None when
        nobody waits, or past a bound: try at once."""
        if self._wait_seconds <= 0 or not self._waits.ahead(caller.account_id):
            return None, False
        wait = self._waits.join(caller.account_id)
        if wait is None:
            return None, False
        try:
            with waiting():
                return wait, not await wait.next_try(until)
        except BaseException:
            self._waits.leave(wait)
            raise

    async def _slot_for_try(
        self, caller: Caller, started: float, until: float, final: bool
    ) -> bool:
        """A replica slot for this try; True when it had to wait for one. A request whose
        wait behind its account's requests is over (`final`) does not wait for one: it is
        refused for its account's cap, the limit it waited for (the replica's slots are then
        mostly its account's other last tries), not `global`."""
        if self._replica_slot(caller.account_id):
            return False
        if final:
            self._waited(True, started, admitted=False)
            raise self._refusals.account_full(self._shared is not None and not self.degraded)
        await self._replica_slot_within(caller.account_id, started, until)
        return True

    async def _replica_slot_within(self, account: UUID, started: float, until: float) -> None:
        """One of this replica's slots, waited for in its fair queue until `until`; the
        `global` 429 when none came."""
        if self._wait_seconds <= 0:
            got = False
        else:
            with waiting():
                got = await self.slots.wait(until, account)
        if not got:
            self._waited(True, started, admitted=False)
            raise self._refusals.replica_full(self.slots.capacity)

    def _replica_slot(self, account: UUID) -> bool:
        """One of this replica's slots now, if one is free and nobody waits for one (a
        lapsed fleet lease is noticed here first)."""
        if self.fleet is not None and self._shared is not None:
            self.fleet.expire_if_due()
        return self.slots.take(account)

    async def _ask(self, request_id: str, caller: Caller) -> Decision | object | None:
        """The shared limiter's answer; None to let the per-process limiter answer."""
        shared = self._shared
        if shared is None:
            return None
        if self._breaker.state is State.CLOSED:
            return await shared.decision(shared.submit(request_id, caller))
        # Redis is down: this request is answered by the per-process limits. Whether
        # Redis is back is asked by a background probe, never by a user's request, so an
        # outage costs no refusals beyond the switch-over itself.
        shared.probe_when_due()
        return None

    def _waited(self, waited: bool, started: float, *, admitted: bool) -> None:
        if waited:
            seconds = asyncio.get_running_loop().time() - started
            self._metrics.limit_waited(seconds, admitted)

    def begin(self, request_id: str, caller: Caller) -> Admitting | None:
        """Send this request's admission now, for `settle` to decide once its work is done;
        None when the request should wait for its admission first (`acquire`): overlap is
        off, there is no Redis or the breaker is not closed, the approval's budget is
        spent, the shared limiter refused this approval or its account a moment ago
        (recent_refusals.py), requests of the account wait here, or no replica slot is free."""
        shared = self._shared
        if (
            not self.limits.admission_overlap
            or shared is None
            or self._breaker.state is not State.CLOSED
            or self._recent.refused(caller)
            or self._spent.holds(caller.approval_id)
            or self._waits.ahead(caller.account_id)
        ):
            return None
        if not self._replica_slot(caller.account_id):
            return None
        return shared.submit(request_id, caller)

    async def settle(self, admitting: Admitting) -> Grant:
        """`begin`'s admission decided: a `Grant`, or `LimitExceeded` as `acquire` raises
        (a concurrency refusal waits for a slot first, as in `acquire`)."""
        assert self._shared is not None
        try:
            answer = await self._shared.decision(admitting)
        except BaseException:
            self.slots.give_back(admitting.caller.account_id)
            raise
        return await self._admit(admitting.request_id, admitting.caller, answer)

    def abandon(self, admitting: Admitting) -> None:
        """`begin`'s request ended before `settle` (cancelled, past its deadline): what the
        script decided is undone (shared_limiter.py), and its replica slot freed."""
        self.slots.give_back(admitting.caller.account_id)
        if self._shared is not None:
            self._shared.abandon(admitting)

    def _decided(
        self, answer: Decision | object | None, request_id: str, caller: Caller
    ) -> Grant | tuple[Decision, bool]:
        """A grant, or the refused decision and whether the shared limiter made it."""
        if answer is UNANSWERED:
            self._refused_recently(caller, None)
            raise self._refusals.unanswered()
        if isinstance(answer, Decision):
            decision, shared = answer, True
        else:
            decision = self._local.acquire(request_id, caller.account_id, caller.approval_id)
            shared = False
        if not decision.admitted:
            return decision, shared
        return Grant(request_id, caller.account_id, caller.approval_id, shared, decision.budget)

    def _refused(self, decision: Decision, shared: bool, caller: Caller) -> LimitExceeded:
        """The 429 of a refusal that stands (counted once, remembered for `begin`)."""
        if shared:
            self._refused_recently(caller, decision.limit)
            if decision.limit == APPROVAL and decision.retry_ms > 0:
                self._spent.remember(caller.approval_id, decision)
        return self._refusals.refusal(decision, shared)

    def _refused_recently(self, caller: Caller, limit: str | None) -> None:
        if self.limits.admission_overlap:  # the hint is `begin`'s alone (recent_refusals.py)
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
            except Exception:  # handled by shared_limiter.py's callback; the lease bounds it
                pass

    def release_soon(self, grant: Grant) -> asyncio.Future[Any] | None:
        """Free the grant's slots (idempotent): the release is queued on the pipeline at
        once, so it reaches Redis before any later admission made by this replica.
        Returns the pending reply, or None when nothing is left to wait for."""
        if grant.released:
            return None
        grant.released = True
        self.slots.give_back(grant.account_id)
        if not grant.shared:
            self._local.release(grant.request_id)
            self._waits.freed(grant.account_id)
            return None
        if self._shared is None:
            return None
        pending = self._shared.release_soon(grant.request_id, grant.account_id, grant.approval_id)
        self._waits.freed(grant.account_id)  # after the release: it reaches Redis first
        return pending

    async def warm_up(self) -> None:
        """Load the scripts before the first request (shared_limiter.py), and take this replica's
        first fleet lease."""
        if self._shared is not None:
            await self._shared.warm_up()
        if self.fleet is not None:
            await self.fleet.renew()

    async def check(self, operation: str = "probe") -> bool:
        """A real script call proving the shared limiter works (shared_limiter.py); False without
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
        if self.fleet is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await self.fleet.renew(release=True)  # its block returns at once
        if self._shared is not None:
            await self._shared.close()
