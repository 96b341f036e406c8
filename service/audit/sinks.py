"""Where audit lines are written: stdout, an appended file, a unix or TCP stream socket.

A sink takes a batch of whole lines and either writes all of it or raises OSError; the
writer (service/audit/writer.py) keeps the batch and tries again, so a line is written at
least once. The sinks that never wait (stdout, a file) also take a line with `write_now`,
called from the request itself. A socket sink reconnects on the next try after a failure;
a file sink appends to its path and reopens it when the path names another file (rotation
by rename, as logrotate does it; copy-and-truncate works too: see docs/operations.md,
Audit trail).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from typing import Protocol, TextIO

from service.settings.audit import Audit


class Sink(Protocol):
    async def write(self, lines: bytes) -> None: ...

    async def close(self) -> None: ...


class StreamSink:
    """stdout, beside the request log. Written from the event loop's thread, as the log
    handler is, so an audit line and a log line never interleave."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    async def write(self, lines: bytes) -> None:
        self.write_now(lines)

    def write_now(self, lines: bytes) -> None:
        self._stream.write(lines.decode("utf-8"))
        self._stream.flush()

    async def close(self) -> None:
        self._stream.flush()


class FileSink:
    """A file opened for append (O_APPEND: whole lines even with other writers)."""

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


class SocketSink:
    """A stream socket to a local collector (unix path, or TCP host and port)."""

    def __init__(self, cfg: Audit) -> None:
        self._cfg = cfg
        self._writer: asyncio.StreamWriter | None = None

    async def _connect(self) -> asyncio.StreamWriter:
        if self._cfg.sink == "unix":
            _, writer = await asyncio.open_unix_connection(self._cfg.target)
        else:
            _, writer = await asyncio.open_connection(self._cfg.target, self._cfg.port)
        return writer

    async def write(self, lines: bytes) -> None:
        try:
            if self._writer is None:
                self._writer = await asyncio.wait_for(self._connect(), 5.0)
            self._writer.write(lines)
            await self._writer.drain()
        except (OSError, TimeoutError) as err:
            await self.close()
            raise OSError(f"audit sink {self._cfg.sink}: {err!r}") from err

    async def close(self) -> None:
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def open_sink(cfg: Audit) -> Sink:
    """The sink ELOVA_AUDIT_SINK names."""
    if cfg.sink == "stdout":
        return StreamSink(sys.stdout)
    if cfg.sink == "file":
        return FileSink(cfg.target)
    return SocketSink(cfg)
