"""The shared limiter's Redis side: admit.lua and release.lua through one pipeline, the
circuit breaker that decides when Redis is believed down, and the compensations that undo
an admission nobody waited for.

`SharedLimiter.submit` queues one admission and returns at once (`Admitting`, its reply on
the way); `decision` waits for that reply. Admission (admission.py) either waits at once
(`acquire`) or lets the request's work run first (`begin`/`settle`, docs/decisions/limits.md,
Overlapped admission). Entering and leaving the degraded mode (per-process limits while the
breaker holds Redis open) is logged once each and exported through
`Metrics.limiter_degraded`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from redis.exceptions import RedisError

from service.auth.caller import Caller
from service.limits.breaker import CircuitBreaker, State
from service.limits.budget import Decision
from service.limits.local_limiter import LocalLimiter
from service.limits.pipeline import ScriptPipeline
from service.limits.redis_client import RedisClient
from service.limits.script_calls import ScriptCalls
from service.observability.metrics.app_metrics import Metrics
from service.observability.tracing import hooks as tracing

log = logging.getLogger("service.limits")

# A compensating release retries at these delays (seconds after the failed admission);
# after the last one, the lease's own expiry frees the slots.
_COMPENSATION_DELAYS = (0.0, 0.25, 1.0, 3.0)

# `SharedLimiter.decision` could not tell whether the request is admitted (see there).
UNANSWERED = object()

# The health check's script call: a release of an id no request has, on keys no caller
# has (an account no one has: ZREM of an absent member changes nothing).
_PROBE_ID = "elova-health-probe"
_PROBE_OWNER = UUID(int=0)

_FAILURES = (RedisError, OSError, TimeoutError)


@dataclass(eq=False, slots=True)
class Admitting:
    """One admission on its way: admit.lua is queued, its reply not yet handled. The trace
    span of the call (when traced) is open from the submit to the reply's handling."""

    request_id: str
    caller: Caller
    reply: asyncio.Future[Any]
    started: float
    span: contextlib.AbstractContextManager[Any]


class SharedLimiter:
    def __init__(
        self,
        redis: RedisClient,
        calls: ScriptCalls,
        *,
        metrics: Metrics,
        breaker: CircuitBreaker,
        local: LocalLimiter,
        timeout_seconds: float,
    ) -> None:
        self._calls = calls
        self._metrics = metrics
        self.breaker = breaker
        self._local = local  # its caps are what the degraded-mode log line names
        self._timeout = timeout_seconds
        # Admissions and releases of concurrent requests share writes (see pipeline.py);
        # each call is bounded as a whole (the batch ahead of it, connect, a reload after
        # NOSCRIPT, redirects) at 3x the client's timeout, so no path can stall a request.
        self.pipeline = ScriptPipeline(redis, bound=timeout_seconds * 3)
        self._background: set[asyncio.Task[None]] = set()
        self.degraded = False

    # Admissions -------------------------------------------------------------------------

    def submit(self, request_id: str, caller: Caller) -> Admitting:
        """Queue admit.lua for this request now; its reply is handled by `decision` (or
        undone by `abandon`)."""
        calls = self._calls
        started = time.perf_counter()
        packed = calls.admit(request_id, caller.account_id, caller.approval_id)
        span = tracing.redis_span("EVALSHA", "admit")  # a span only when traced
        span.__enter__()
        slot = calls.slot(caller.account_id, caller.approval_id)
        reply = self.pipeline.submit(calls.admit_script, packed, slot)
        return Admitting(request_id, caller, reply, started, span)

    async def decision(self, admitting: Admitting) -> Decision | object | None:
        """The script's decision; None to let the per-process limiter answer (the breaker
        is open: Redis is down, or a compensation cancelled this id); UNANSWERED for one
        failure while Redis is believed up."""
        try:
            await admitting.reply
        except asyncio.CancelledError as err:
            # The client went away mid-admission: the script may still run on the server.
            self._gone(admitting, err)
            raise
        except _FAILURES:
            pass  # the reply's failure is handled with its outcome
        return self._outcome(admitting)

    def abandon(self, admitting: Admitting) -> None:
        """The request ended (cancelled, past its deadline) without waiting for its
        admission's reply: whatever the script decided or will decide is undone."""
        reply = admitting.reply
        if not reply.done() or reply.cancelled():
            reply.cancel()  # the call is sent regardless (pipeline.py)
            self._gone(admitting, asyncio.CancelledError())
            return
        decision = self._outcome(admitting)
        if isinstance(decision, Decision) and decision.admitted:
            caller = admitting.caller
            self.release_soon(admitting.request_id, caller.account_id, caller.approval_id)

    def _gone(self, admitting: Admitting, err: asyncio.CancelledError) -> None:
        """Nobody waits for the reply any more: the script may still run, so undo it."""
        _end(admitting, err)
        self.breaker.abandon()
        self._compensate(admitting)

    def _outcome(self, admitting: Admitting) -> Decision | object | None:
        """`decision`'s answer from a reply that came (a result or a failure)."""
        reply = admitting.reply
        err = reply.exception()
        _end(admitting, err)
        if err is not None:
            return self._failed_admission(admitting, err)
        return self._answered(admitting, reply.result())

    def _answered(self, admitting: Admitting, reply: Any) -> Decision | None:
        self._metrics.redis_call("admit", time.perf_counter() - admitting.started, False)
        self._succeeded()
        decision = self._calls.decision(reply)
        if decision is None:
            log.warning(
                "admission: request id %s reused after its compensation", admitting.request_id
            )
        return decision

    def _failed_admission(self, admitting: Admitting, err: BaseException) -> object | None:
        self._metrics.redis_call("admit", time.perf_counter() - admitting.started, True)
        self._failed(err)
        if not _refused_connection(err):
            # A timed-out admission may have run (or still run) on the server.
            self._compensate(admitting)
        # One failure (a slow reply, a dropped connection) is not an outage: admitting
        # from this replica's share now would stack on the shared caps, so refuse with
        # the short hint. Only an open breaker (a real outage) switches to per-process.
        return None if self.breaker.state is State.OPEN else UNANSWERED

    # Releases ---------------------------------------------------------------------------

    def release_soon(
        self, request_id: str, account_id: UUID, approval_id: UUID
    ) -> asyncio.Future[Any] | None:
        """Queue release.lua at once, so it reaches Redis before any later admission made
        by this replica; its reply (metrics, the breaker) is handled when it arrives, by a
        callback rather than a task. Returns the pending reply, or None when nobody should
        wait for it (Redis is failing: the lease bounds the leak)."""
        if self.breaker.state is not State.CLOSED:
            self._spawn(self._release(request_id, account_id, approval_id))
            return None
        packed = self._calls.release(request_id, account_id, approval_id)
        slot = self._calls.slot(account_id, approval_id)
        reply = self.pipeline.submit(self._calls.release_script, packed, slot)
        reply.add_done_callback(functools.partial(self._released, time.perf_counter()))
        return reply

    def _released(self, started: float, reply: asyncio.Future[Any]) -> None:
        if reply.cancelled():
            # Its waiter went away (the client, a shutdown): the call is sent regardless,
            # and its outcome is nobody's to count.
            return
        err = reply.exception()
        self._metrics.redis_call("release", time.perf_counter() - started, err is not None)
        if err is not None and self.breaker.state is State.CLOSED:
            self._failed(err)

    async def _release(
        self, request_id: str, account_id: UUID, approval_id: UUID, *, compensate: bool = False
    ) -> bool:
        """One release call; True when Redis answered."""
        calls = self._calls
        pack = calls.compensate if compensate else calls.release
        started = time.perf_counter()
        try:
            await self.pipeline.submit(
                calls.release_script,
                pack(request_id, account_id, approval_id),
                calls.slot(account_id, approval_id),
            )
        except _FAILURES as err:
            self._metrics.redis_call("release", time.perf_counter() - started, True)
            if self.breaker.state is State.CLOSED:
                self._failed(err)
            return False
        self._metrics.redis_call("release", time.perf_counter() - started, False)
        return True

    def _compensate(self, admitting: Admitting) -> None:
        request_id = admitting.request_id
        account_id, approval_id = admitting.caller.account_id, admitting.caller.approval_id

        async def run() -> None:
            waited = 0.0
            for delay in _COMPENSATION_DELAYS:
                await asyncio.sleep(delay - waited)
                waited = delay
                if await self._release(request_id, account_id, approval_id, compensate=True):
                    return

        self._spawn(run())

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # Health, start and stop -------------------------------------------------------------

    async def warm_up(self) -> None:
        """Load both scripts (and open a connection) before the first request; a Redis that
        does not answer now is not an error: requests find out through the breaker."""
        try:
            async with asyncio.timeout(self._timeout * 3):
                await self.pipeline.preload([self._calls.admit_script, self._calls.release_script])
        except _FAILURES as err:
            log.info(
                "Redis did not answer at start (%s); admissions will retry it", type(err).__name__
            )

    async def check(self, operation: str = "probe") -> bool:
        """Prove that the shared limiter works: a real script call (a release of an id no
        request has) on an account slot no one has, through the admissions' own pipeline, so a
        server that answers but redirects or refuses the script fails too. Success closes
        the breaker (shared limits again); a failure counts as a failed admission does."""
        started = time.perf_counter()
        try:
            packed = self._calls.release(_PROBE_ID, _PROBE_OWNER, _PROBE_OWNER)
            slot = self._calls.slot(_PROBE_OWNER, _PROBE_OWNER)
            await self.pipeline.submit(self._calls.release_script, packed, slot)
        except asyncio.CancelledError:
            self.breaker.abandon()
            raise
        except _FAILURES as err:
            self._metrics.redis_call(operation, time.perf_counter() - started, True)
            self._failed(err)
            return False
        self._metrics.redis_call(operation, time.perf_counter() - started, False)
        self._succeeded()
        return True

    def probe_when_due(self) -> None:
        """Once the breaker's cooldown has passed, check the limiter in the background (one
        trial at a time); success closes the breaker, failure opens it for another
        cooldown. The app also checks on its own schedule (limiter_health.py)."""
        if self.breaker.allow():
            self._spawn(self.check("probe"))

    async def close(self) -> None:
        """Give pending compensating releases a moment, then stop them."""
        await self.pipeline.close()
        if self._background:
            await asyncio.wait(self._background, timeout=0.5)
        for task in list(self._background):
            task.cancel()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    # Breaker and degraded mode ----------------------------------------------------------

    def _failed(self, err: BaseException) -> None:
        self.breaker.record_failure()
        if self.breaker.state is not State.CLOSED and not self.degraded:
            self.degraded = True
            log.warning(
                "shared limits unavailable (Redis: %s); per-process limits apply: "
                "account %d, approval %d a minute",
                type(err).__name__,
                self._local.account_cap,
                self._local.per_minute,
            )
            self._metrics.limiter_degraded(True)

    def _succeeded(self) -> None:
        self.breaker.record_success()
        if self.degraded:
            self.degraded = False
            log.warning("shared limits restored: Redis answers again")
            self._metrics.limiter_degraded(False)


def _end(admitting: Admitting, err: BaseException | None) -> None:
    """Close the admission's trace span, marked failed by `err`."""
    span = admitting.span
    if err is None:
        span.__exit__(None, None, None)
        return
    with contextlib.suppress(BaseException):
        span.__exit__(type(err), err, err.__traceback__)


def _refused_connection(err: BaseException) -> bool:
    """The connection was refused, so the command was certainly never sent."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ConnectionRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False
