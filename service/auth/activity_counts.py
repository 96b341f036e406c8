"""The approval activity counts of one process: tool calls per approval, tool and hour,
held until the next flush adds them to `approval_activity` (service/auth/activity.py runs the
flusher and reads the table).

Counting is in memory only (no I/O). Pending counters are bounded (`MAX_PENDING`): a call
that finds the bound reached is dropped and counted in `dropped`. A failed flush puts its
counts back, except those older than `RETENTION` or past the bound.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import asyncpg

MAX_PENDING = 10_000  # (approval, tool, hour) counters held between flushes, at most
RETENTION = timedelta(days=31)  # longer than the longest approval expiry (30 days)

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
