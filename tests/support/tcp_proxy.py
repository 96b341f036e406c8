"""A loopback TCP proxy that a test can cut: real outages of PostgreSQL or Redis, no mocks.

The service connects through the proxy; `cut()` closes the listener and every open
connection, so the next call fails the way it does when a dependency host goes away.
With `delay`, every chunk is delivered that many seconds late in each direction, in order:
a dependency one network hop away (tests/bench/delay_proxy.py runs one for benchmarks).
"""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, delay: float = 0.0) -> None:
        self._target = (target_host, target_port)
        self._delay = delay
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        if self._delay:
            loop = asyncio.get_running_loop()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(65536):  # the same delay a chunk keeps order
                    loop.call_later(self._delay, dst.write, data)
            loop.call_later(self._delay, dst.close)
            return
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while data := await src.read(65536):
                dst.write(data)
                await dst.drain()
        dst.close()

    async def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        if server is not None:
            await server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def restore(self) -> None:
        """Listen again on the same port."""
        await self.start()
