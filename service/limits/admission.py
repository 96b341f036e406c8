"""Admission: every request takes its limits before any work, shared by all replicas.

`Admission.acquire(request_id, caller)` returns a `Grant` or raises `LimitExceeded`;
`Admission.release(grant)` frees its concurrency slots (idempotent). With Redis the whole
check-and-take is one Lua script (admit.lua, EVALSHA) on Redis time; without Redis, or
while the circuit breaker holds Redis open, a per-process limiter with this replica's share
of each cap answers instead (docs/limits.md). Entering and leaving that degraded mode is
logged once each and exported through `Metrics.limiter_degraded`.

Every key of one script call shares one hash slot (`{limits}` hash tag), because the
script takes the global slot and the account's slot in the same atomic step; see
docs/decisions/limits.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from redis.exceptions import RedisError

from service import tracing
from service.auth.caller import Caller
from service.errors import LimitExceeded
from service.headers import RATE_LIMIT
from service.limits.breaker import CircuitBreaker, State
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
from service.limits.local import LocalLimiter
from service.limits.pipeline import Script, ScriptPipeline
from service.limits.redis_client import REDIS_TIMEOUT_SECONDS, RedisClient
from service.metrics import Metrics
from service.settings.limits import Limits

log = logging.getLogger("service.limits")

# A compensating release retries at these delays (seconds after the failed admission);
# after the last one, the lease's own expiry frees the slots.
_COMPENSATION_DELAYS = (0.0, 0.25, 1.0, 3.0)

# How many (account, approval) key lists `keys` remembers before starting over.
_KNOWN_KEYS = 4096

# `_admit_shared` could not tell whether the request is admitted (see there).
_UNANSWERED = object()

# The health check's script call: a release of an id no request has, on keys no caller
# has (the global lease set is the limiter's own: ZREM of an absent member changes nothing).
_PROBE_ID = "elova-health-probe"
_PROBE_OWNER = UUID(int=0)


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
        self._redis = redis
        self._base = f"{key_prefix}{{limits}}:"
        self._metrics = metrics
        self._breaker = breaker or CircuitBreaker()
        self._timeout = timeout_seconds
        lease_seconds = limits.request_deadline_seconds + limits.lease_grace_seconds
        self._lease_ms = round(lease_seconds * 1000)
        self._local = LocalLimiter.share(limits, limits.expected_replicas)
        self._admit = Script("admit.lua")
        self._release = Script("release.lua")
        # Admissions and releases of concurrent requests share writes (see pipeline.py).
        self._pipeline = (
            ScriptPipeline(redis, slot_key=f"{self._base}global", bound=timeout_seconds * 3)
            if redis is not None
            else None
        )
        self._background: set[asyncio.Task[None]] = set()
        self._degraded = False
        self._keys: dict[tuple[UUID, UUID], list[str]] = {}
        # Approvals the shared limiter refused for their rate budget: until the next token
        # (the script's own retry time) Redis would refuse them again, so this replica
        # answers those 429s itself (monotonic deadline, the script's decision, its time).
        self._spent: dict[UUID, _Spent] = {}

    @property
    def degraded(self) -> bool:
        """True while Redis is configured but the per-process limiter answers instead."""
        return self._degraded

    @property
    def breaker(self) -> CircuitBreaker:
        return self._breaker

    @property
    def pipeline(self) -> ScriptPipeline | None:
        return self._pipeline

    @property
    def local(self) -> LocalLimiter:
        return self._local

    def keys(self, account_id: UUID, approval_id: UUID) -> list[str]:
        """The five keys of one script call, all in one hash slot (remembered for the
        approvals seen lately: every request of an approval uses the same five)."""
        known = self._keys.get((account_id, approval_id))
        if known is not None:
            return known
        b = self._base
        keys = [
            f"{b}global",
            f"{b}account:{account_id}",
            f"{b}approval:{approval_id}",
            f"{b}daily:{account_id}",
            f"{b}cancelled",
        ]
        if len(self._keys) >= _KNOWN_KEYS:
            self._keys.clear()
        self._keys[(account_id, approval_id)] = keys
        return keys

    async def acquire(self, request_id: str, caller: Caller) -> Grant:
        spent = self._spent.get(caller.approval_id)
        if spent is not None:
            refusal = self._still_spent(caller.approval_id, spent)
            if refusal is not None:
                raise refusal
        decision: Decision | None = None
        if self._redis is not None:
            if self._breaker.state is State.CLOSED:
                answer = await self._admit_shared(request_id, caller)
                if answer is _UNANSWERED:
                    raise self._unanswered()
                decision = answer if isinstance(answer, Decision) else None
            else:
                # Redis is down: this request is answered by the per-process limits. Whether
                # Redis is back is asked by a background probe, never by a user's request,
                # so an outage costs no refusals beyond the switch-over itself.
                self._probe_when_due()
        shared = decision is not None
        if decision is None:
            decision = self._local.acquire(request_id, caller.account_id, caller.approval_id)
        if not decision.admitted:
            if shared and decision.limit == APPROVAL and decision.retry_ms > 0:
                self._remember_spent(caller.approval_id, decision)
            raise self._refusal(decision, shared)
        return Grant(request_id, caller.account_id, caller.approval_id, shared, decision.budget)

    async def release(self, grant: Grant) -> None:
        """`release_soon`, then wait (bounded) for Redis to confirm it: what the transport
        does before answering. Cancelling the wait does not cancel the release."""
        pending = self.release_soon(grant)
        if pending is not None:
            await asyncio.wait([pending], timeout=self._timeout * 3)

    def release_soon(self, grant: Grant) -> asyncio.Future[Any] | None:
        """Free the grant's slots (idempotent): the release is queued on the pipeline at
        once, so it reaches Redis before any later admission made by this replica, and its
        reply (metrics, the breaker) is handled when it arrives, by a callback rather than
        a task. Returns the pending reply, or None when nothing is left to wait for."""
        if grant.released:
            return None
        grant.released = True
        if not grant.shared:
            self._local.release(grant.request_id)
            return None
        if self._breaker.state is not State.CLOSED or self._pipeline is None:
            # Redis is failing: do not make anyone wait; the lease bounds the leak.
            self._spawn(self._release_shared(grant.request_id, grant.account_id, grant.approval_id))
            return None
        args = self._release_args(grant.request_id, compensate=False)
        keys = self.keys(grant.account_id, grant.approval_id)
        reply = self._pipeline.submit(self._release, keys, args)
        reply.add_done_callback(functools.partial(self._released, time.perf_counter()))
        return reply

    def _released(self, started: float, reply: asyncio.Future[Any]) -> None:
        err = asyncio.CancelledError() if reply.cancelled() else reply.exception()
        self._metrics.redis_call("release", time.perf_counter() - started, err is not None)
        if err is not None and self._breaker.state is State.CLOSED:
            self._failed(err)

    async def warm_up(self) -> None:
        """Load both scripts (and open a connection) before the first request; a Redis that
        does not answer now is not an error: requests find out through the breaker."""
        if self._pipeline is None:
            return
        try:
            async with asyncio.timeout(self._timeout * 3):
                await self._pipeline.preload([self._admit, self._release])
        except (RedisError, OSError, TimeoutError) as err:
            log.info(
                "Redis did not answer at start (%s); admissions will retry it", type(err).__name__
            )

    async def check(self, operation: str = "probe") -> bool:
        """Prove that the shared limiter works: a real script call (a release of an id no
        request has) on the limiter's slot, through the admissions' own pipeline, so a
        server that answers but redirects or refuses the script fails too. Success closes
        the breaker (shared limits again); a failure counts as a failed admission does."""
        if self._pipeline is None:
            return False
        started = time.perf_counter()
        try:
            keys = self.keys(_PROBE_OWNER, _PROBE_OWNER)
            await self._call(self._release, keys, self._release_args(_PROBE_ID, compensate=False))
        except asyncio.CancelledError:
            self._breaker.abandon()
            raise
        except (RedisError, OSError, TimeoutError) as err:
            self._metrics.redis_call(operation, time.perf_counter() - started, True)
            self._failed(err)
            return False
        self._metrics.redis_call(operation, time.perf_counter() - started, False)
        self._succeeded()
        return True

    async def shared_state(self) -> str:
        """What /readyz reports: `ok` when the shared limiter answered a check just now,
        `degraded` otherwise (per-process limits apply, or will if Redis keeps failing),
        `not_configured` without Redis. The check runs whenever the breaker lets a call
        through (always while closed: an idle replica finds an outage here too)."""
        if self._pipeline is None:
            return "not_configured"
        answered = self._breaker.allow() and await self.check("health")
        return "ok" if answered and not self._degraded else "degraded"

    async def close(self) -> None:
        """Give pending compensating releases a moment, then stop them."""
        if self._pipeline is not None:
            await self._pipeline.close()
        if self._background:
            await asyncio.wait(self._background, timeout=0.5)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # Redis side -------------------------------------------------------------------------

    async def _admit_shared(self, request_id: str, caller: Caller) -> Decision | object | None:
        """The script's decision; None to let the per-process limiter answer (the breaker
        is open: Redis is down); _UNANSWERED for one failure while Redis is believed up."""
        lim = self.limits
        args = (
            request_id,
            lim.global_concurrency,
            lim.account_concurrency,
            lim.approval_per_minute,
            self._lease_ms,
            lim.account_per_day or 0,
        )
        started = time.perf_counter()
        try:
            keys = self.keys(caller.account_id, caller.approval_id)
            with tracing.redis_span("EVALSHA", "admit"):  # a span only when traced
                reply = await self._call(self._admit, keys, args)
        except asyncio.CancelledError:
            # The client went away mid-admission: the script may still run on the server.
            self._breaker.abandon()
            self._compensate(request_id, caller.account_id, caller.approval_id)
            raise
        except (RedisError, OSError, TimeoutError) as err:
            self._metrics.redis_call("admit", time.perf_counter() - started, True)
            self._failed(err)
            if not _refused_connection(err):
                # A timed-out admission may have run (or still run) on the server.
                self._compensate(request_id, caller.account_id, caller.approval_id)
            # One failure (a slow reply, a dropped connection) is not an outage: admitting
            # from this replica's share now would stack on the shared caps, so refuse with
            # the short hint. Only an open breaker (a real outage) switches to per-process.
            return None if self._breaker.state is State.OPEN else _UNANSWERED
        self._metrics.redis_call("admit", time.perf_counter() - started, False)
        self._succeeded()
        status, limit, retry_ms, milli_tokens, used, reset_ms = (_int_or_str(v) for v in reply)
        budget = Budget(
            lim.approval_per_minute,
            int(milli_tokens) / 1000,
            lim.account_per_day,
            int(used),
            int(reset_ms) / 1000,
        )
        if status == -1:
            log.warning("admission: request id %s reused after its compensation", request_id)
            return None
        if status == 1:
            return Decision(True, budget)
        return Decision(False, budget, str(limit), int(retry_ms))

    async def _release_shared(
        self, request_id: str, account_id: UUID, approval_id: UUID, *, compensate: bool = False
    ) -> bool:
        """One release call; True when Redis answered."""
        assert self._redis is not None
        args = self._release_args(request_id, compensate=compensate)
        started = time.perf_counter()
        try:
            await self._call(self._release, self.keys(account_id, approval_id), args)
        except (RedisError, OSError, TimeoutError) as err:
            self._metrics.redis_call("release", time.perf_counter() - started, True)
            if self._breaker.state is State.CLOSED:
                self._failed(err)
            return False
        self._metrics.redis_call("release", time.perf_counter() - started, False)
        return True

    def _release_args(self, request_id: str, *, compensate: bool) -> tuple[Any, ...]:
        lim = self.limits
        return (
            request_id,
            1 if compensate else 0,
            self._lease_ms,
            lim.approval_per_minute,
            lim.account_per_day or 0,
        )

    async def _call(self, script: Script, keys: Sequence[str], args: Sequence[Any]) -> Any:
        # Each step is bounded by the client's timeouts; this bounds the whole call (the
        # batch ahead of it, pool, connect, a reload after NOSCRIPT) so no path can stall a
        # request.
        assert self._pipeline is not None
        async with asyncio.timeout(self._timeout * 3):
            return await self._pipeline.call(script, keys, args)

    def _compensate(self, request_id: str, account_id: UUID, approval_id: UUID) -> None:
        async def run() -> None:
            waited = 0.0
            for delay in _COMPENSATION_DELAYS:
                await asyncio.sleep(delay - waited)
                waited = delay
                done = await self._release_shared(
                    request_id, account_id, approval_id, compensate=True
                )
                if done:
                    return

        self._spawn(run())

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # Breaker and degraded mode ----------------------------------------------------------

    def _failed(self, err: BaseException) -> None:
        self._breaker.record_failure()
        if self._breaker.state is not State.CLOSED and not self._degraded:
            self._degraded = True
            log.warning(
                "shared limits unavailable (Redis: %s); per-process limits apply: "
                "global %d, account %d, approval %d a minute",
                type(err).__name__,
                self._local.global_cap,
                self._local.account_cap,
                self._local.per_minute,
            )
            self._metrics.limiter_degraded(True)

    def _probe_when_due(self) -> None:
        """Once the breaker's cooldown has passed, check the limiter in the background (one
        trial at a time); success closes the breaker, failure opens it for another
        cooldown. The app also checks on its own schedule (watch.py)."""
        if self._breaker.allow():
            self._spawn(self.check("probe"))

    def _succeeded(self) -> None:
        self._breaker.record_success()
        if self._degraded:
            self._degraded = False
            log.warning("shared limits restored: Redis answers again")
            self._metrics.limiter_degraded(False)

    def _remember_spent(self, approval_id: UUID, decision: Decision) -> None:
        if len(self._spent) >= _KNOWN_KEYS:
            self._spent.clear()
        self._spent[approval_id] = _Spent(time.monotonic(), decision)

    def _still_spent(self, approval_id: UUID, spent: _Spent) -> LimitExceeded | None:
        """The 429 the shared limiter would answer now for an approval it refused for its
        rate budget, or None once its next token is due (then Redis decides again). Its
        text and headers change once a second: they are made once a second."""
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
            spent.shown = self._refusal(later, True, count=False)
            spent.shown_retry = retry
        assert spent.shown is not None
        self._metrics.limit_refused(APPROVAL)
        shown = spent.shown
        return LimitExceeded(
            APPROVAL, shown.retry_after_seconds, shown.message, headers=shown.headers
        )

    def _unanswered(self) -> LimitExceeded:
        self._metrics.limit_refused(GLOBAL)
        retry = concurrency_hint()
        # The budget is unknown; what holds is "nothing more until the hint has passed".
        headers = Budget(
            self.limits.approval_per_minute, 0.0, self.limits.account_per_day
        ).headers()
        headers[RATE_LIMIT] = f'"{APPROVAL_POLICY}";r=0;t={retry}'
        return LimitExceeded(
            GLOBAL, retry, "The shared limits did not answer in time.", headers=headers
        )

    def _refusal(self, decision: Decision, shared: bool, *, count: bool = True) -> LimitExceeded:
        limit = decision.limit or GLOBAL
        if count:
            self._metrics.limit_refused(limit)
        if shared:
            caps = (self.limits.global_concurrency, self.limits.account_concurrency)
        else:
            caps = (self._local.global_cap, self._local.account_cap)
        return LimitExceeded(
            limit,
            decision.retry_after_seconds(),
            _message(limit, decision.budget, *caps),
            headers=decision.budget.headers(),
        )


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


def _message(limit: str, budget: Budget, global_cap: int, account_cap: int) -> str:
    if limit == ACCOUNT_DAILY:
        return (
            f"This account has used its {budget.daily_cap} requests for today;"
            " the budget resets at 00:00 UTC."
        )
    if limit == APPROVAL:
        return f"This approval has used its {budget.per_minute} requests a minute."
    if limit == ACCOUNT:
        return f"This account already has {account_cap} requests in progress."
    return f"The service is handling {global_cap} requests at once."


def _refused_connection(err: BaseException) -> bool:
    """The connection was refused, so the command was certainly never sent."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _int_or_str(value: Any) -> int | str:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, int):
        return value
    return str(value)
