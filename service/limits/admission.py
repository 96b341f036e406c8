"""Admission: every request takes its limits before any work, shared by all replicas.

`Admission.acquire(request_id, caller)` returns a `Grant` or raises `LimitExceeded`;
`Admission.release(grant)` frees its concurrency slots (idempotent). With Redis the whole
check-and-take is one Lua script (admit.lua, EVALSHA) on Redis time; without Redis, or
while the circuit breaker holds Redis open, a per-process limiter with this replica's share
of each cap answers instead (docs/limits.md). Entering and leaving that degraded mode is
logged once each and exported through `Metrics.limiter_degraded`.

Beside it: calls.py packs the script calls, pipeline.py sends them, refusals.py makes the
429s and spent.py remembers the approvals whose rate budget is spent. Every key of one
script call shares one hash slot (`{limits}` hash tag), because the script takes the
global slot and the account's slot in the same atomic step; see docs/decisions/limits.md.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from redis.exceptions import RedisError

from service import tracing
from service.auth.caller import Caller
from service.limits.breaker import CircuitBreaker, State
from service.limits.budget import APPROVAL, Budget, Decision
from service.limits.calls import ScriptCalls
from service.limits.local import LocalLimiter
from service.limits.pipeline import ScriptPipeline
from service.limits.redis_client import REDIS_TIMEOUT_SECONDS, RedisClient
from service.limits.refusals import Refusals
from service.limits.spent import SpentBudgets
from service.metrics import Metrics
from service.settings.limits import Limits

log = logging.getLogger("service.limits")

# A compensating release retries at these delays (seconds after the failed admission);
# after the last one, the lease's own expiry frees the slots.
_COMPENSATION_DELAYS = (0.0, 0.25, 1.0, 3.0)

# `_admit_shared` could not tell whether the request is admitted (see there).
_UNANSWERED = object()

# The health check's script call: a release of an id no request has, on keys no caller
# has (the global lease set is the limiter's own: ZREM of an absent member changes nothing).
_PROBE_ID = "elova-health-probe"
_PROBE_OWNER = UUID(int=0)

_FAILURES = (RedisError, OSError, TimeoutError)


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
        base = f"{key_prefix}{{limits}}:"
        self._metrics = metrics
        self._breaker = breaker or CircuitBreaker()
        self._timeout = timeout_seconds
        lease_seconds = limits.request_deadline_seconds + limits.lease_grace_seconds
        self._calls = ScriptCalls(base, limits, round(lease_seconds * 1000))
        self._local = LocalLimiter.share(limits, limits.expected_replicas)
        self._refusals = Refusals(limits, self._local, metrics)
        # Approvals the shared limiter refused for their rate budget (spent.py).
        self._spent = SpentBudgets(self._refusals, metrics)
        # Admissions and releases of concurrent requests share writes (see pipeline.py);
        # each call is bounded as a whole (the batch ahead of it, connect, a reload after
        # NOSCRIPT, redirects) at 3x the client's timeout, so no path can stall a request.
        self._pipeline = (
            ScriptPipeline(redis, slot_key=f"{base}global", bound=timeout_seconds * 3)
            if redis is not None
            else None
        )
        self._background: set[asyncio.Task[None]] = set()
        self._degraded = False

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
        """The five keys of one admission, all in one hash slot (calls.py)."""
        return self._calls.keys(account_id, approval_id)

    async def acquire(self, request_id: str, caller: Caller) -> Grant:
        refusal = self._spent.refusal(caller.approval_id)
        if refusal is not None:
            raise refusal
        decision: Decision | None = None
        if self._redis is not None:
            if self._breaker.state is State.CLOSED:
                answer = await self._admit_shared(request_id, caller)
                if answer is _UNANSWERED:
                    raise self._refusals.unanswered()
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
                self._spent.remember(caller.approval_id, decision)
            raise self._refusals.refusal(decision, shared)
        return Grant(request_id, caller.account_id, caller.approval_id, shared, decision.budget)

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
            except Exception:  # handled by `_released`; the lease bounds it
                pass

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
        packed = self._calls.release(grant.request_id, grant.account_id, grant.approval_id)
        reply = self._pipeline.submit(self._calls.release_script, packed)
        reply.add_done_callback(functools.partial(self._released, time.perf_counter()))
        return reply

    def _released(self, started: float, reply: asyncio.Future[Any]) -> None:
        if reply.cancelled():
            # Its waiter went away (the client, a shutdown): the call is sent regardless,
            # and its outcome is nobody's to count.
            return
        err = reply.exception()
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
                await self._pipeline.preload([self._calls.admit_script, self._calls.release_script])
        except _FAILURES as err:
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
            packed = self._calls.release(_PROBE_ID, _PROBE_OWNER, _PROBE_OWNER)
            await self._pipeline.submit(self._calls.release_script, packed)
        except asyncio.CancelledError:
            self._breaker.abandon()
            raise
        except _FAILURES as err:
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
        is open: Redis is down, or a compensation cancelled this id); _UNANSWERED for one
        failure while Redis is believed up."""
        assert self._pipeline is not None
        calls = self._calls
        started = time.perf_counter()
        try:
            packed = calls.admit(request_id, caller.account_id, caller.approval_id)
            with tracing.redis_span("EVALSHA", "admit"):  # a span only when traced
                reply = await self._pipeline.submit(calls.admit_script, packed)
        except asyncio.CancelledError:
            # The client went away mid-admission: the script may still run on the server.
            self._breaker.abandon()
            self._compensate(request_id, caller.account_id, caller.approval_id)
            raise
        except _FAILURES as err:
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
        decision = calls.decision(reply)
        if decision is None:
            log.warning("admission: request id %s reused after its compensation", request_id)
        return decision

    async def _release_shared(
        self, request_id: str, account_id: UUID, approval_id: UUID, *, compensate: bool = False
    ) -> bool:
        """One release call; True when Redis answered."""
        assert self._pipeline is not None
        calls = self._calls
        pack = calls.compensate if compensate else calls.release
        started = time.perf_counter()
        try:
            await self._pipeline.submit(
                calls.release_script, pack(request_id, account_id, approval_id)
            )
        except _FAILURES as err:
            self._metrics.redis_call("release", time.perf_counter() - started, True)
            if self._breaker.state is State.CLOSED:
                self._failed(err)
            return False
        self._metrics.redis_call("release", time.perf_counter() - started, False)
        return True

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


def _refused_connection(err: BaseException) -> bool:
    """The connection was refused, so the command was certainly never sent."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
