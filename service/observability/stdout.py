"""The process's stdout as whole lines, written without ever blocking the event loop.

The log (service/observability/logs.py) and the audit trail's `stdout` sink
(service/audit/sinks.py) both write through the one `LineOutput` of stdout (`line_output`),
so their lines never interleave. When the pipe stays full, a log line is dropped and counted
(`elova_mcp_log_lines_dropped_total`, `register_metrics`) and an audit line is refused, for
the audit writer to wait. `tell_operator` writes a shutdown report to stderr, waiting a
bounded time. Why: docs/decisions/audit-trail.md, "Issue 42: the sinks on a bad day" and
"Issue 54" (our own non-blocking descriptor: fd 1 and a `2>&1` stderr stay blocking).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import stat
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

BUFFER_BYTES = 1024 * 1024
_NEWLINE = ord("\n")
REPORT_SECONDS = 5.0  # the longest `tell_operator` waits for a full stderr


class LineOutput:
    """Whole lines to one stream; `offer` never blocks when the stream is a pipe or socket.

    When the stream is a pipe or a socket (a container runtime, a log shipper) it is written
    without waiting, never by changing its descriptor's flags (`_Unwaiting`): a line is
    written at once when the pipe has room, else kept in a buffer of at most BUFFER_BYTES
    that the event loop writes out as the reader makes room. When the
    pipe stays full (a reader that stopped reading) the buffer fills, and then:

    - a log line is dropped and counted (`drop`): a log is worth less than a process that
      answers `/livez`, `/metrics` and SIGTERM;
    - an audit line is not taken (`offer` is False): the audit writer queues it and the
      request waits for room (`room`), at most ELOVA_AUDIT_WAIT_SECONDS, then is refused
      503 (never answered without its line).

    Any other stream (a file, a terminal, a test's capture) is written as before.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        found = _pipe_fd(stream)
        self._out = None if found is None else _Unwaiting(found)
        self._fd = None if self._out is None else self._out.fd
        self._pending = bytearray()  # bytes taken, not yet in the pipe (whole lines' tails)
        self._lock = threading.Lock()  # log lines may come from other threads
        self._loop: asyncio.AbstractEventLoop | None = None  # writing `_pending` out
        self._room: list[asyncio.Future[None]] = []
        self.dropped = 0  # log lines dropped because the pipe stayed full
        self.mid_line = False  # the pipe holds the head of a line whose tail is `_pending`
        if self._fd is not None:
            stream.flush()  # what the stream buffered goes first

    @property
    def non_blocking(self) -> bool:
        return self._fd is not None

    def offer(self, lines: bytes) -> bool:
        """Write whole lines, or keep them to write once the pipe has room; False (nothing
        written) when the buffer is full."""
        if self._fd is None:
            self._stream.write(lines.decode("utf-8"))
            self._stream.flush()
            return True
        with self._lock:
            if self._pending:
                if len(self._pending) + len(lines) > BUFFER_BYTES:
                    return False
                self._pending += lines
                if self._loop is None:
                    self._watch()
                return True
            assert self._out is not None
            try:
                written = self._out.write(lines)
            except BlockingIOError:
                written = 0
            if written:
                self.mid_line = lines[written - 1] != _NEWLINE
            if written < len(lines):
                self._pending += lines[written:]  # a line begun is always finished
                self._watch()
            return True

    def drop(self) -> None:
        """Count a log line that was not taken."""
        self.dropped += 1

    async def room(self) -> None:
        """Return once everything taken so far is in the pipe."""
        if self._fd is None:
            return
        with self._lock:
            if not self._pending:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._room.append(waiter)
            self._watch()
        await waiter

    def _watch(self) -> None:
        """Have the event loop write `_pending` out when the pipe has room (lock held)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a thread without a loop: the loop that watches, if any
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._watch_locked)
            return
        if self._loop is not loop and self._fd is not None:
            self._stop_watching()
            self._loop = loop
            loop.add_writer(self._fd, self._write_pending)

    def _watch_locked(self) -> None:
        with self._lock:
            if self._pending:
                self._watch()

    def _stop_watching(self) -> None:
        if self._loop is not None and self._fd is not None:
            with contextlib.suppress(RuntimeError):  # a loop already closed
                self._loop.remove_writer(self._fd)
        self._loop = None

    def _write_pending(self) -> None:
        assert self._out is not None
        with self._lock:
            try:
                written = self._out.write(self._pending)
            except BlockingIOError:
                return
            except OSError:  # the reader is gone (EPIPE): nothing will take these bytes
                written = len(self._pending)
            if written:
                self.mid_line = self._pending[written - 1] != _NEWLINE
            del self._pending[:written]
            if self._pending:
                return
            self._stop_watching()
            waiters, self._room = self._room, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


def _pipe_fd(stream: TextIO) -> int | None:
    """The stream's descriptor when it is a pipe or a socket (a write to it can block)."""
    try:
        fd = stream.fileno()
        mode = os.fstat(fd).st_mode
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return fd if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) else None


class _Unwaiting:
    """Writes to a pipe or socket that never wait, leaving the descriptor's flags alone.

    O_NONBLOCK belongs to the open file description, which a `2>&1` stderr shares with
    stdout: setting it on fd 1 would make stderr's writes fail with EAGAIN too. So a pipe or
    FIFO is opened anew (/proc/self/fd/N: a description of our own, non-blocking) and a
    socket is sent to with MSG_DONTWAIT. Only where neither works (no /proc) is fd 1 itself
    made non-blocking, as before."""

    def __init__(self, fd: int) -> None:
        self._sock: socket.socket | None = None
        own = _own_description(fd)
        if own is not None:
            self.fd = own
        elif stat.S_ISSOCK(os.fstat(fd).st_mode):
            self._sock = socket.socket(fileno=os.dup(fd))
            self.fd = self._sock.fileno()
        else:
            os.set_blocking(fd, False)
            self.fd = fd

    def write(self, data: bytes | bytearray) -> int:
        """Bytes written (BlockingIOError: none, the pipe is full). To a pipe, at most
        PIPE_BUF bytes ending at a line's end: such a write is atomic, so another writer of
        the same pipe (a `2>&1` stderr) never lands inside one of our lines."""
        if self._sock is not None:
            return self._sock.send(data, socket.MSG_DONTWAIT)
        if len(data) <= select.PIPE_BUF:
            return os.write(self.fd, data)
        end = data.rfind(b"\n", 0, select.PIPE_BUF)
        return os.write(self.fd, memoryview(data)[: end + 1 if end >= 0 else select.PIPE_BUF])


def _own_description(fd: int) -> int | None:
    """A new non-blocking open file description of the pipe or FIFO at `fd` (None: not a
    pipe, no /proc, or a FIFO with no reader)."""
    if not stat.S_ISFIFO(os.fstat(fd).st_mode):
        return None
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None


def tell_operator(line: bytes, seconds: float = REPORT_SECONDS) -> bool:
    """Write `line` to stderr (fd 2), waiting at most `seconds` for room, never changing fd
    2's flags: a pipe through a description of our own, anything else after `poll` says it
    has room. False: not written (stderr closed, or still full)."""
    deadline = time.monotonic() + seconds
    if _stdout_mid_line_on_stderr():
        line = b"\n" + line  # a `2>&1` pipe holds the head of a stdout line: end it first
    view = memoryview(line)
    own = None
    try:
        own = _own_description(2)
        target = 2 if own is None else own
        while view:
            left = deadline - time.monotonic()
            ready = select.poll()
            ready.register(target, select.POLLOUT)
            if left <= 0 or not ready.poll(left * 1000):
                return False
            with contextlib.suppress(BlockingIOError):
                view = view[os.write(target, view) :]
        return True
    except OSError:  # no stderr, or nobody reads it any more
        return False
    finally:
        if own is not None:
            os.close(own)


def _stdout_mid_line_on_stderr() -> bool:
    """Whether one of our outputs stopped mid-line in the very pipe fd 2 writes to."""
    try:
        two = os.fstat(2)
        for out in _OUTPUTS.values():
            if out.mid_line and out._fd is not None:
                one = os.fstat(out._fd)
                if (one.st_dev, one.st_ino) == (two.st_dev, two.st_ino):
                    return True
    except OSError:
        return False
    return False


_OUTPUTS: dict[int, LineOutput] = {}


def line_output(stream: TextIO) -> LineOutput:
    """The one LineOutput of a stream (the log and the audit sink share stdout's)."""
    found = _OUTPUTS.get(id(stream))
    if found is None or found._stream is not stream:
        found = _OUTPUTS[id(stream)] = LineOutput(stream)
    return found


class _Dropped(Collector):
    def __init__(self, output: LineOutput) -> None:
        self._output = output

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "elova_mcp_log_lines_dropped",
            "Log lines dropped because stdout (a pipe) stayed full.",
            value=self._output.dropped,
        )


def register_metrics(output: LineOutput, registry: CollectorRegistry) -> None:
    """`elova_mcp_log_lines_dropped_total` of `output`, in an app's registry."""
    registry.register(_Dropped(output))
