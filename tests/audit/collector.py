"""A TCP audit collector in a process of its own, for tests that kill it (SIGKILL) mid-stream:
it appends every byte it receives to a file, as a log shipper's TCP input would.

    python -m tests.audit.collector PORT PATH     (prints "listening" once bound)
"""

from __future__ import annotations

import asyncio
import os
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


if __name__ == "__main__":
    asyncio.run(_serve(int(sys.argv[1]), sys.argv[2]))
