"""Approval activity: how many tool calls each approval made, per tool and hour, and when it
was last used.

The tool-call path only adds one to a counter in this process (`record_call`: no I/O, no
round trip). A background task of each replica adds its counts to `approval_activity` on the
primary pool about once a second, in one upsert statement that sums into the rows other
replicas write too, so what the approvals page reads is the total over every replica, at
most a flush interval late. A failed flush keeps its counts for the next try; pending counts
are bounded (`MAX_PENDING`), and a call that finds the bound reached is dropped and counted
in `dropped`. The last counts are flushed when the app shuts down. Rows older than
`RETENTION` are deleted by the flusher now and then.

`read_approval_activity` is what pages and commands read: per approval, calls per tool in
the last 24 hours and 7 days (whole hours: the current hour and the 23 or 167 before it)
and the instant of its newest call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import asyncpg
from aiohttp import web

from service.keys import ACTIVITY, CALLER, DB_POOL

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
SHUTDOWN_FLUSH_SECONDS = 5.0
MAX_PENDING = 10_000  # (approval, tool, hour) counters held between flushes, at most
RETENTION = timedelta(days=31)  # longer than the longest approval expiry (30 days)
PRUNE_EVERY_SECONDS = 600.0

_HOUR = 3600

_UPSERT = """
    INSERT INTO approval_activity (approval_id, hour, tool, calls, last_call_at)
    SELECT u.approval_id, to_timestamp(u.hour * 3600), u.tool, u.calls, to_timestamp(u.last)
      FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::bigint[], $5::float8[])
           AS u (approval_id, hour, tool, calls, last)
     -- an approval deleted since its calls (its account was deleted) takes them along
     WHERE EXISTS (SELECT 1 FROM approvals a WHERE a.id = u.approval_id)
    ON CONFLICT (approval_id, hour, tool) DO UPDATE
       SET calls = approval_activity.calls + EXCLUDED.calls,
           last_call_at = greatest(approval_activity.last_call_at, EXCLUDED.last_call_at)
"""
_PRUNE = "DELETE FROM approval_activity WHERE hour < now() - $1::interval"
_READ = """
    SELECT approval_id, tool,
           sum(calls) FILTER (WHERE hour >= date_trunc('hour', now()) - interval '23 hours')
               AS last_day,
           sum(calls) FILTER (WHERE hour >= date_trunc('hour', now()) - interval '167 hours')
               AS last_week,
           max(last_call_at) AS last_call_at
      FROM approval_activity
     WHERE approval_id = ANY($1::uuid[])
     GROUP BY approval_id, tool
"""


@dataclass(frozen=True, slots=True)
class ToolCalls:
    tool: str
    last_day: int
    last_week: int


@dataclass(frozen=True, slots=True)
class ApprovalActivity:
    """One approval's calls per tool (tools called in the last 7 days, most calls first)
    and its newest call (None: no call within the retention)."""

    last_used: datetime | None = None
    tools: tuple[ToolCalls, ...] = ()


@dataclass(slots=True)
class _Count:
    calls: int
    last: float


@dataclass
class ActivityRecorder:
    """This process's counts since the last flush."""

    clock: Callable[[], float] = time.time
    dropped: int = 0
    _pending: dict[tuple[uuid.UUID, int, str], _Count] = field(default_factory=dict)

    def record(self, approval_id: uuid.UUID, tool: str) -> None:
        now = self.clock()
        key = (approval_id, int(now // _HOUR), tool)
        count = self._pending.get(key)
        if count is not None:
            count.calls += 1
            count.last = max(count.last, now)
        elif len(self._pending) < MAX_PENDING:
            self._pending[key] = _Count(1, now)
        else:
            self.dropped += 1

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush(self, db: asyncpg.Pool | asyncpg.Connection) -> int:
        """Add the pending counts to the table (one statement); the number of rows sent.
        On failure the counts go back to pending (within the bound) and the error is raised."""
        if not self._pending:
            return 0
        batch, self._pending = self._pending, {}
        # One order for every replica: concurrent upserts of the same rows cannot deadlock.
        keys = sorted(batch)
        try:
            await db.execute(
                _UPSERT,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [k[2] for k in keys],
                [batch[k].calls for k in keys],
                [batch[k].last for k in keys],
            )
        except BaseException:
            self._restore(batch)
            raise
        return len(keys)

    def _restore(self, batch: dict[tuple[uuid.UUID, int, str], _Count]) -> None:
        oldest = int(self.clock() // _HOUR) - int(RETENTION.total_seconds() // _HOUR)
        for key, count in batch.items():
            current = self._pending.get(key)
            if current is not None:
                current.calls += count.calls
                current.last = max(current.last, count.last)
            elif len(self._pending) < MAX_PENDING and key[1] >= oldest:
                self._pending[key] = count
            else:
                self.dropped += count.calls


def record_call(request: web.Request, tool: str | None) -> None:
    """Count one answered tool call of this request's caller (no I/O)."""
    caller = request.get(CALLER)
    recorder = request.app.get(ACTIVITY)
    if tool is not None and caller is not None and recorder is not None:
        recorder.record(caller.approval_id, tool)


async def flush_now(app: web.Application) -> None:
    """Flush this replica's pending counts (a page about to read them); errors are logged."""
    recorder = app.get(ACTIVITY)
    if recorder is None or not recorder.pending:
        return
    try:
        await recorder.flush(app[DB_POOL])
    except Exception as err:  # the page still shows what the table holds
        log.warning("approval activity not flushed: %r", err)


async def _flush_forever(app: web.Application, recorder: ActivityRecorder) -> None:
    pruned_at = 0.0
    while True:
        await asyncio.sleep(FLUSH_SECONDS)
        pool = app[DB_POOL]
        try:
            await recorder.flush(pool)
            if time.monotonic() - pruned_at >= PRUNE_EVERY_SECONDS:
                await pool.execute(_PRUNE, RETENTION)
                pruned_at = time.monotonic()
        except Exception as err:  # the next round tries again; the task must not end
            log.warning(
                "approval activity not flushed (%d counters kept): %r", recorder.pending, err
            )


async def activity_ctx(app: web.Application) -> AsyncIterator[None]:
    """The recorder in app[ACTIVITY] and its flusher; the last flush at shutdown (before the
    pool closes: this context is registered after the pool's)."""
    recorder = app[ACTIVITY] = ActivityRecorder()
    task = asyncio.create_task(_flush_forever(app, recorder), name="approval-activity-flush")
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    try:
        async with asyncio.timeout(SHUTDOWN_FLUSH_SECONDS):
            await recorder.flush(app[DB_POOL])
    except Exception as err:
        log.warning("approval activity lost at shutdown (%d counters): %r", recorder.pending, err)


async def read_approval_activity(
    db: asyncpg.Pool | asyncpg.Connection, approval_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, ApprovalActivity]:
    """Each approval's activity (every id given has an entry; no calls: the empty one)."""
    found: dict[uuid.UUID, ApprovalActivity] = {a: ApprovalActivity() for a in approval_ids}
    if not approval_ids:
        return found
    rows = await db.fetch(_READ, list(approval_ids))
    tools: dict[uuid.UUID, list[ToolCalls]] = {}
    last: dict[uuid.UUID, datetime] = {}
    for r in rows:
        aid = r["approval_id"]
        if r["last_week"]:
            tools.setdefault(aid, []).append(
                ToolCalls(r["tool"], int(r["last_day"] or 0), int(r["last_week"]))
            )
        seen = r["last_call_at"]
        if aid not in last or seen > last[aid]:
            last[aid] = seen
    for aid in found:
        listed = sorted(tools.get(aid, []), key=lambda t: (-t.last_week, -t.last_day, t.tool))
        found[aid] = ApprovalActivity(last.get(aid), tuple(listed))
    return found
