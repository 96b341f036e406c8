"""Approval activity: how many tool calls each approval made, per tool and hour, and when it
was last used.

The tool-call path only counts in this process (`record_call`, no I/O; the counters are
service/auth/activity_counts.py's); each replica's flusher adds its counts to
`approval_activity` on the primary about once a second and deletes rows older than
`RETENTION`. `read_approval_activity` is what pages and commands read. Why in process, how
replicas add up, the bounds and the failure cases: docs/decisions/activity.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from aiohttp import web

from service.app_keys import ACTIVITY, CALLER, DB_POOL
from service.auth.activity_counts import RETENTION, ActivityRecorder

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
SHUTDOWN_FLUSH_SECONDS = 5.0
PRUNE_EVERY_SECONDS = 600.0

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


def record_call(request: web.Request, app: web.Application, tool: str | None) -> None:
    """Count one answered tool call of this request's caller on `app`'s recorder (no I/O)."""
    if tool is None:
        return
    caller = request.get(CALLER)
    recorder = app.get(ACTIVITY)
    if caller is not None and recorder is not None:
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
    """Each approval's activity (every id given has an entry; no calls: the empty one): its
    calls per tool in the last 24 hours and 7 days (whole hours: the current hour and the 23
    or 167 before it) and the instant of its newest call."""
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
