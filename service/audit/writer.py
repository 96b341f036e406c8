"""The audit writer: a bounded queue of lines and the one task that writes them to the sink.

`record` writes a line at once through a sink that never waits when nothing is ahead of it,
gathers refusals' lines of one loop turn into one write, and otherwise queues the line; a
full queue holds the request at most ELOVA_AUDIT_WAIT_SECONDS, then AuditUnavailable (503).
The writer task writes what it can take as one batch and keeps a refused batch for the next
try; at shutdown the queue is drained before the sink is closed, and what was not written
(or, by a socket sink, not known read) is reported on stderr. `AuditMetrics` are its
metrics in the app's registry. Why back-pressure, at least once, and half the queue for
refusals: docs/decisions/audit-trail.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge

from service.audit.events import AuditEvent, encode_line
from service.audit.sinks import Sink
from service.errors import AuditUnavailable
from service.observability.logs import JsonFormatter
from service.observability.metrics import updates as metric_updates
from service.observability.stdout import tell_operator
from service.settings.audit import Audit

log = logging.getLogger(__name__)

MAX_BATCH_LINES = 512
LONGEST_BACKOFF_SECONDS = 1.0
DRAIN_SECONDS = 10.0


class AuditMetrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        def counter(name: str, doc: str) -> Counter:
            return Counter(f"elova_mcp_audit_{name}", doc, registry=registry)

        self.written = counter("lines_written_total", "Audit lines written to the sink.")
        self.waits = counter(
            "queue_waits_total", "Audit lines that found the queue full and waited for room."
        )
        self.refused = counter(
            "refused_total", "Requests refused 503 because their audit line found no room."
        )
        self.sink_errors = counter(
            "sink_errors_total", "Failed writes to the audit sink (the batch is retried)."
        )
        self.depth = Gauge(
            "elova_mcp_audit_queue_depth", "Audit lines queued, not yet written.", registry=registry
        )


class AuditWriter:
    """`record` hands a line to a sink that writes without waiting (stdout, a file) at once
    when nothing is queued or being written before it: a tool call's line then costs one
    write, not a hop through the writer task. Under a flood of refusals (a line already
    written at this instant of the loop's clock) a refusal's line joins a batch written once
    the loop's turn ends. Otherwise (a socket sink, a backlog, a failed write) the line is
    queued. When the queue is full the request waits for room (the call is held, the line
    is not dropped) at most ELOVA_AUDIT_WAIT_SECONDS; past that it raises AuditUnavailable
    and the request is refused 503. Refusals' lines (an answer that carries no data: 401,
    403, 429 …) may hold at most half the queue: past that they wait for room in their
    half. A batch the sink refuses is kept and tried again, backing off up to a second."""

    def __init__(
        self,
        cfg: Audit,
        sink: Sink,
        registry: CollectorRegistry | None = None,
        instant: Callable[[], float] | None = None,
    ) -> None:
        self._cfg = cfg
        self.sink = sink
        self._queue: asyncio.Queue[tuple[bytes, bool]] = asyncio.Queue(cfg.queue_lines)
        # Refusals' lines (401, 403, 429 …: no data left) hold at most half the queue, so a
        # flood of them cannot fill it and make real calls wait, then 503.
        self._refusals = asyncio.Semaphore(max(1, cfg.queue_lines // 2))
        self._task: asyncio.Task[None] | None = None
        self._writing = False  # the writer task holds a batch (being written or retried)
        self._in_hand = 0  # lines of that batch
        self.metrics = AuditMetrics(registry)
        self.metrics.depth.set_function(self._queue.qsize)
        # A sink that writes without waiting (stdout, a file) takes lines from the request.
        self._write_now: Callable[[bytes], None] | None = getattr(sink, "write_now", None)
        self._instant = instant  # the clock of `_gathered`: the running loop's unless given
        self._written_at = -1.0  # when a line was last written at once (`instant`)
        self._gathering: list[bytes] | None = None  # refusals' lines of this instant

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    async def record(self, audit_event: AuditEvent, *, refusal: bool = False) -> None:
        """Queue the event's line, waiting for room at most the configured bound. The line
        of a refusal may join the batch of this instant (see `_gathered`)."""
        await self.record_line(encode_line(audit_event), refusal=refusal)

    async def record_line(self, line: bytes, *, refusal: bool = False) -> None:
        """`record` of a line already encoded (events.LineTemplate)."""
        if self._gathering is not None:
            self._gathering.append(line)
            if not refusal:  # a line that may go with data: written before the answer
                self._write_gathered()
            return
        if not self._writing and self._queue.empty():
            if refusal and self._gathered(line):
                return
            if self._written_now(line):
                return
        item = (line, refusal)
        if not self._queue.full() and not (refusal and self._refusals.locked()):
            if refusal:
                await self._refusals.acquire()  # free: returns at once
            self._queue.put_nowait(item)
            return
        self.metrics.waits.inc()
        shared = False
        try:
            async with asyncio.timeout(self._cfg.wait_seconds):
                if refusal:
                    await self._refusals.acquire()
                    shared = True
                await self._queue.put(item)
        except TimeoutError:
            if shared:
                self._refusals.release()
            self.metrics.refused.inc()
            raise AuditUnavailable() from None

    def _written_now(self, lines: bytes, count: int = 1) -> bool:
        """Whether a sink that writes without waiting took the lines (False: queue them, and
        the writer task writes them, retrying as for any batch)."""
        if self._write_now is None:
            return False
        try:
            self._write_now(lines)
        except Exception as err:  # whatever the sink raised: the lines go to the queue
            self.metrics.sink_errors.inc()
            log.warning("audit sink write failed, queued for the writer: %r", err)
            return False
        metric_updates.count(self.metrics.written, count)  # a line a call: not its lock
        self._written_at = self._now()
        return True

    def _now(self) -> float:
        return asyncio.get_running_loop().time() if self._instant is None else self._instant()

    def _gathered(self, line: bytes) -> bool:
        """Whether the refusal's line waits for the batch of this instant: when a line was
        already written at this instant of the event loop's clock (uvloop's advances once
        a turn of the loop, in milliseconds), refusals are flooding in; their lines are
        gathered and written as one batch once this turn's requests have run, one write
        instead of one a refusal. The answer may leave before its line is written, as with
        a queued line; a line is never dropped (a failed batch goes to the queue)."""
        if self._write_now is None or self._now() != self._written_at:
            return False
        self._gathering = [line]
        asyncio.get_running_loop().call_soon(self._write_gathered)
        return True

    def _write_gathered(self) -> None:
        lines, self._gathering = self._gathering, None
        if not lines or self._written_now(b"".join(lines), len(lines)):
            return
        for line in lines:
            try:
                self._queue.put_nowait((line, False))
            except asyncio.QueueFull:  # kept: it waits for room, however long
                asyncio.get_running_loop().create_task(self._queue.put((line, False)))

    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH_LINES and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            self._writing, self._in_hand = True, len(batch)
            try:
                await self._write(b"".join(line for line, _ in batch))
            finally:
                self._writing, self._in_hand = False, 0
            self.metrics.written.inc(len(batch))
            for _, refusal in batch:
                if refusal:
                    self._refusals.release()
                self._queue.task_done()

    async def _write(self, lines: bytes) -> None:
        backoff = 0.05
        while True:
            try:
                await self.sink.write(lines)
                return
            except Exception as err:  # whatever the sink raised: the batch is kept
                self.metrics.sink_errors.inc()
                log.warning("audit sink write failed, retrying: %r", err)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, LONGEST_BACKOFF_SECONDS)

    async def flushed(self) -> None:
        """Return once every line queued so far is written."""
        self._write_gathered()
        await self._queue.join()

    async def drain(self, seconds: float = DRAIN_SECONDS) -> None:
        """Write what is queued (within `seconds`), then stop the task and close the sink;
        report on stderr what is left (`report`)."""
        self._write_gathered()
        unwritten = 0
        if self._task is not None:
            try:
                async with asyncio.timeout(seconds):
                    await self._queue.join()
            except TimeoutError:
                unwritten = self._queue.qsize() + self._in_hand
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.sink.close()
        unread = getattr(self.sink, "kept_lines", 0)  # a socket sink's, not known read
        if unwritten or unread:
            await asyncio.to_thread(report, unwritten, unread)


def report(unwritten: int, unread: int) -> bool:
    """The shutdown's report of lines left, one JSON line in the log's shape on stderr, not
    the log: with stdout stuck the log is what could not be written (a bounded wait for a
    full stderr, then given up). True: written."""
    message = "audit: %d lines not written at shutdown"
    args: tuple[int, ...] = (unwritten,)
    if unread:
        message += "; %d lines sent to the collector not known read by it"
        args += (unread,)
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, args, None)
    return tell_operator((JsonFormatter().format(record) + "\n").encode())
