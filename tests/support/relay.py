"""A loopback TCP relay a test can black-hole: a path to PostgreSQL or Redis that silently
stops carrying traffic, as a dropped route or a firewall that drops packets does.

    relay = await Relay(target_port).start()     # 127.0.0.1:relay.port -> 127.0.0.1:target
    relay.blackhole()    # keeps accepting and holding connections; forwards and answers
                         # nothing, in either direction, and never resets one
    relay.forward()      # the path heals: what was held is delivered, as TCP retransmits
    await relay.stop()

While black-holed, a new connection is accepted (the client's connect succeeds, as the
handshake of a silently dropping path may) but not connected to the target until the path
heals; an open one stalls with its bytes held, so no client sees an error, only silence.
Nothing about the service is mocked: it connects to the relay's port as to the real server.
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._target = (target_host, target_port)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0
        self.accepted = 0  # connections accepted since start, black-holed ones included
        self._stopping = False

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def blackhole(self) -> None:
        self._flowing.clear()

    def forward(self) -> None:
        self._flowing.set()

    @property
    def blackholed(self) -> bool:
        return not self._flowing.is_set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            await self._flowing.wait()  # held, unanswered, until the path heals
            if self._stopping:
                raise ConnectionAbortedError
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except (OSError, asyncio.CancelledError):
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(up_writer)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while True:
                await self._flowing.wait()
                data = await src.read(65536)
                if not data:
                    break
                await self._flowing.wait()  # read while flowing, held if the path broke since
                dst.write(data)
                await dst.drain()
        self._writers.discard(dst)
        dst.close()

    async def stop(self) -> None:
        """Stop listening and drop every connection (an abort: the test is over)."""
        self._stopping = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._flowing.set()  # the connections still held see `_stopping` and go
        if server is not None:
            await server.wait_closed()
