"""Where audit lines are written: stdout, an appended file, a unix or TCP stream socket.

A sink takes a batch of whole lines and either writes all of it or raises OSError; the
writer (service/audit/writer.py) keeps the batch and tries again, backing off, so a line is
written at least once. The sinks that never wait (stdout, a file) also take a line with
`write_now`, called from the request itself. A socket sink resends its recent lines after
reconnecting (docs/decisions/audit-trail.md, "Issue 42: the sinks on a bad day"); how
rotation and collectors meet the sinks: docs/operations.md, Audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from service.observability.stdout import LineOutput, line_output
from service.settings.audit import Audit


class Sink(Protocol):
    async def write(self, lines: bytes) -> None: ...

    async def close(self) -> None: ...


CLOSE_SECONDS = 1.0  # the longest a closing stdout sink waits for a full pipe


class StreamSink:
    """stdout, beside the request log, through the same LineOutput
    (service/observability/stdout.py), so an audit line and a log line never interleave and
    a pipe nobody reads never blocks the event loop: a line the full pipe cannot take is
    not written now (`write_now` raises, the writer queues it) and the writer task waits for
    room (the request's bounded wait, then 503)."""

    def __init__(self, output: LineOutput) -> None:
        self.output = output

    async def write(self, lines: bytes) -> None:
        while not self.output.offer(lines):
            await self.output.room()

    def write_now(self, lines: bytes) -> None:
        if not self.output.offer(lines):
            raise OSError("stdout is full (a pipe nobody reads)")

    async def close(self) -> None:
        with contextlib.suppress(TimeoutError):  # a pipe still full: do not hold up the exit
            async with asyncio.timeout(CLOSE_SECONDS):
                await self.output.room()


class FileSink:
    """A file opened for append (O_APPEND: whole lines even with other writers), reopened
    when its path names another file (rotation by rename, as logrotate does it;
    copy-and-truncate works too)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._fd: int | None = None

    def _rotated(self) -> bool:
        assert self._fd is not None
        try:
            return os.stat(self._path).st_ino != os.fstat(self._fd).st_ino
        except FileNotFoundError:
            return True

    async def write(self, lines: bytes) -> None:
        self.write_now(lines)

    def write_now(self, lines: bytes) -> None:
        if self._fd is not None and self._rotated():
            self._close()
        if self._fd is None:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
        try:
            view = memoryview(lines)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            self._close()
            raise

    async def close(self) -> None:
        self._close()

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


# What a socket sink sends again after reconnecting: the lines it wrote this recently, at
# most this much of them (a collector reads within milliseconds; a dead one is noticed at
# the next write, within the writer's backoff of a second).
RESEND_SECONDS = 5.0
RESEND_BYTES = 8 * 1024 * 1024
CONNECT_SECONDS = 5.0


class SocketSink:
    """A stream socket to a local collector (unix path, or TCP host and port).

    It reconnects on the next try after a failure (a refused connection, a reset, a
    collector that closed its end, uvloop's "transport closed") and first sends again what
    it wrote in the last RESEND_SECONDS (at most RESEND_BYTES): a line reaches a restarted
    collector at least once, possibly twice (deduplicate on the whole line). Lines are only
    ever sent whole, so a new connection never starts mid-line."""

    def __init__(self, cfg: Audit, clock: Callable[[], float] = time.monotonic) -> None:
        self._cfg = cfg
        self._clock = clock
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._recent: deque[tuple[float, bytes]] = deque()  # (written at, lines)
        self._recent_bytes = 0
        self._failed = False  # a connection failed: the next one sends `_recent` first

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._cfg.sink == "unix":
            return await asyncio.open_unix_connection(self._cfg.target)
        return await asyncio.open_connection(self._cfg.target, self._cfg.port)

    def _connection_lost(self) -> bool:
        """Whether the collector closed or reset the connection since the last write."""
        assert self._reader is not None and self._writer is not None
        return self._writer.is_closing() or self._reader.at_eof()

    async def write(self, lines: bytes) -> None:
        try:
            writer = await self._connection()
            writer.write(lines)
            await writer.drain()
        except (OSError, RuntimeError, TimeoutError) as err:
            # RuntimeError: uvloop's write to a transport that closed under it
            await self._drop()
            raise OSError(f"audit sink {self._cfg.sink}: {err!r}") from err
        self._keep(lines)

    async def _connection(self) -> asyncio.StreamWriter:
        """The open connection, or a new one (after a failure: with the recent lines resent)."""
        if self._writer is not None and self._connection_lost():
            await self._drop()
        if self._writer is None:
            connecting = asyncio.wait_for(self._connect(), CONNECT_SECONDS)
            self._reader, self._writer = await connecting
            if self._failed and self._recent:
                self._writer.write(b"".join(kept for _, kept in self._recent))
            self._failed = False
        return self._writer

    def _keep(self, lines: bytes) -> None:
        now = self._clock()
        self._recent.append((now, lines))
        self._recent_bytes += len(lines)
        while self._recent and (
            self._recent[0][0] < now - RESEND_SECONDS or self._recent_bytes > RESEND_BYTES
        ):
            self._recent_bytes -= len(self._recent.popleft()[1])

    async def _drop(self) -> None:
        """Forget a failed connection; the next write opens a new one and resends."""
        self._failed = True
        await self.close()

    async def close(self) -> None:
        self._reader = None
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            with contextlib.suppress(OSError, RuntimeError):
                await writer.wait_closed()


def open_sink(cfg: Audit) -> Sink:
    """The sink ELOVA_AUDIT_SINK names."""
    if cfg.sink == "stdout":
        return StreamSink(line_output(sys.stdout))
    if cfg.sink == "file":
        return FileSink(cfg.target)
    return SocketSink(cfg)
