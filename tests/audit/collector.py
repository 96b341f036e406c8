"""A TCP audit collector in a process of its own, for tests that kill it (SIGKILL) mid-stream:
it appends every byte it receives to a file, as a log shipper's TCP input would.

    python -m tests.audit.collector PORT PATH [BYTES_PER_SECOND]   (prints "listening")

With BYTES_PER_SECOND it reads that slowly, a tenth of it every 0.1 s straight from the
socket (no reader buffer): what it read is stored, what it did not stays in the kernel.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys


async def _serve(port: int, path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    async def take(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while chunk := await reader.read(65536):
            os.write(fd, chunk)
        writer.close()

    server = await asyncio.start_server(take, "127.0.0.1", port)
    sys.stdout.write("listening\n")
    sys.stdout.flush()
    async with server:
        await server.serve_forever()


async def _serve_slowly(port: int, path: str, rate: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    loop = asyncio.get_running_loop()
    listener = socket.create_server(("127.0.0.1", port))
    listener.setblocking(False)
    sys.stdout.write("listening\n")
    sys.stdout.flush()

    async def take(conn: socket.socket) -> None:
        while chunk := await loop.sock_recv(conn, max(1, rate // 10)):
            os.write(fd, chunk)
            await asyncio.sleep(0.1)
        conn.close()

    taking = set()
    while True:
        conn, _ = await loop.sock_accept(listener)
        conn.setblocking(False)
        task = asyncio.create_task(take(conn))
        taking.add(task)
        task.add_done_callback(taking.discard)


if __name__ == "__main__":
    if len(sys.argv) > 3:
        asyncio.run(_serve_slowly(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
    else:
        asyncio.run(_serve(int(sys.argv[1]), sys.argv[2]))
