"""Where audit lines are written: stdout, an appended file, a unix or TCP stream socket.

A sink takes a batch of whole lines and either writes all of it or raises OSError; the
writer (service/audit/writer.py) keeps the batch and tries again, backing off, so a line is
written at least once. The sinks that never wait (stdout, a file) also take a line with
`write_now`, called from the request itself. A socket sink keeps what its collector may not
have read and sends it again after reconnecting (docs/audit.md; docs/decisions/audit-trail.md,
"Issue 54"); how rotation and collectors meet the sinks: docs/operations.md, Audit trail.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import socket
import struct
import sys
import termios
from collections import deque
from pathlib import Path
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


CONNECT_SECONDS = 5.0
PEER_BUFFER_FLOOR = 8 * 1024 * 1024  # the least a collector's side is assumed to hold


def host_receive_buffer() -> int:
    """The largest receive buffer a TCP socket of this host can reach: net.ipv4.tcp_rmem's
    max (autotuning) or twice net.core.rmem_max (an SO_RCVBUF, which Linux doubles), and at
    least PEER_BUFFER_FLOOR (8 MiB; Linux's stock tcp_rmem max is 6 MiB)."""
    found = [PEER_BUFFER_FLOOR]
    with contextlib.suppress(OSError, ValueError, IndexError):
        found.append(int(Path("/proc/sys/net/ipv4/tcp_rmem").read_text().split()[2]))
    with contextlib.suppress(OSError, ValueError):
        found.append(2 * int(Path("/proc/sys/net/core/rmem_max").read_text()))
    return max(found)


def kernel_unread(sock: socket.socket) -> tuple[int, bool]:
    """What the kernel holds of this connection that the peer may not have, and whether
    that is all of it: SIOCOUTQ (TCP: not yet acknowledged by the peer's kernel; a Linux
    unix socket: not yet read by the peer process, so all of it), else SO_SNDBUF, the most
    our side can hold. Raises OSError or ValueError for a socket already closed."""
    try:
        found = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, bytes(4))
        held, exact = struct.unpack("i", found)[0], sock.family == socket.AF_UNIX
    except (AttributeError, OSError):  # no SIOCOUTQ here (AttributeError: no TIOCOUTQ)
        held, exact = sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF), False
    return held, exact and sys.platform == "linux"


class SocketSink:
    """A stream socket to a local collector (unix path, or TCP host and port).

    It keeps every line its collector may not have read yet and, on the connection that
    replaces a failed one (a refused connection, a reset, a collector that closed its end,
    uvloop's "transport closed"), sends those first: a line reaches a collector process at
    least once, possibly twice (deduplicate on request id, type and time). A line is known
    read once more bytes followed it than the transport's buffer, our kernel (`kernel_unread`)
    and the collector's side (`peer_buffer_bytes`, TCP only) can hold; why it is bounded:
    docs/decisions/audit-trail.md, "Issue 54". Lines are only ever sent whole."""

    def __init__(self, cfg: Audit) -> None:
        self._cfg = cfg
        peer = cfg.peer_buffer_bytes
        self.peer_buffer_bytes = host_receive_buffer() if peer is None else peer
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        # Lines the collector may not have read, each batch with the offset of its end in
        # this connection's stream (`_sent`: the bytes handed to it).
        self._kept: deque[tuple[int, bytes]] = deque()
        self.kept_bytes = 0
        self._sent = 0
        self._lock = asyncio.Lock()  # one write (or resend) at a time
        self._watcher: asyncio.Task[None] | None = None  # reads the connection to its end
        self._ended: asyncio.Future[bool] | None = None  # True: the collector closed its end
        self._closing = False

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._cfg.sink == "unix":
            return await asyncio.open_unix_connection(self._cfg.target)
        return await asyncio.open_connection(self._cfg.target, self._cfg.port)

    def _connection_lost(self) -> bool:
        """Whether the collector closed or reset the connection since the last write."""
        assert self._reader is not None and self._writer is not None
        return self._writer.is_closing() or self._reader.at_eof()

    @property
    def kept_lines(self) -> int:
        """Lines kept to send again (whole lines: a batch's are counted by newline)."""
        return sum(lines.count(b"\n") for _, lines in self._kept)

    async def write(self, lines: bytes) -> None:
        async with self._lock:
            try:
                writer = await self._connection()
                self._send(writer, lines)
                await writer.drain()
            except (OSError, RuntimeError, TimeoutError) as err:
                # RuntimeError: uvloop's write to a transport that closed under it
                await self._disconnect()
                raise OSError(f"audit sink {self._cfg.sink}: {err!r}") from err
            self._kept.append((self._sent, lines))
            self.kept_bytes += len(lines)
            self._forget_read(writer)

    async def _watch(self, reader: asyncio.StreamReader, ended: asyncio.Future[bool]) -> None:
        """Read the connection to its end (a collector sends nothing), then, unless closing,
        send the kept lines to a new one at once (not at the next line, which may be long in
        coming), backing off as the writer does."""
        clean = False
        with contextlib.suppress(OSError, RuntimeError):
            while await reader.read(65536):
                pass
            clean = True
        if not ended.done():
            ended.set_result(clean)
        backoff = 0.05
        while self._kept and not self._closing:
            async with self._lock:
                if self._closing:
                    return
                try:
                    writer = await self._connection()
                    await writer.drain()
                    self._forget_read(writer)
                    return
                except (OSError, RuntimeError, TimeoutError):
                    await self._disconnect()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    async def _connection(self) -> asyncio.StreamWriter:
        """The open connection, or a new one, on which every kept line is sent again first."""
        if self._writer is not None and self._connection_lost():
            await self._disconnect()
        if self._writer is None:
            connecting = asyncio.wait_for(self._connect(), CONNECT_SECONDS)
            self._reader, self._writer = await connecting
            self._ended = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.create_task(self._watch(self._reader, self._ended))
            self._sent = 0
            kept, self._kept = self._kept, deque()
            for _, lines in kept:  # their offsets in the new stream
                self._send(self._writer, lines)
                self._kept.append((self._sent, lines))
        return self._writer

    def _send(self, writer: asyncio.StreamWriter, lines: bytes) -> None:
        writer.write(lines)
        self._sent += len(lines)

    def _forget_read(self, writer: asyncio.StreamWriter) -> None:
        """Drop the kept batches the collector has read: those followed by more bytes than
        can still be on their way (in the transport's buffer, our kernel, the peer's)."""
        sock = writer.get_extra_info("socket")
        try:
            held, exact = kernel_unread(sock)
        except (AttributeError, OSError, ValueError):  # closed under us: keep them all
            return
        peer = 0 if exact else self.peer_buffer_bytes
        unread = writer.transport.get_write_buffer_size() + held + peer
        while self._kept and self._kept[0][0] <= self._sent - unread:
            self.kept_bytes -= len(self._kept.popleft()[1])

    async def close(self) -> None:
        """At shutdown: end the stream and wait (CLOSE_SECONDS) for the collector to close
        its end, as a collector does once it read to the end (one closing with bytes unread
        resets instead): then every kept line was read. Those left are `kept_lines`."""
        self._closing = True
        writer, ended = self._writer, self._ended
        if writer is not None and ended is not None and not self._connection_lost():
            with contextlib.suppress(OSError, RuntimeError, TimeoutError):
                writer.write_eof()
                if await asyncio.wait_for(asyncio.shield(ended), CLOSE_SECONDS):
                    self._kept.clear()
                    self.kept_bytes = 0
        await self._disconnect()

    async def _disconnect(self) -> None:
        """Close the connection; the kept lines stay, for the next one."""
        self._reader = None
        watcher, self._watcher = self._watcher, None
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()
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
