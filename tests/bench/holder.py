"""Idle keep-alive connections held open beside a load: `python -m tests.bench.holder PORT N`.

Opens N connections to 127.0.0.1:PORT, sends one request on each (a POST /mcp without
credentials: the cheapest answer, 401) and reads its answer, so every connection is a
served keep-alive connection; then prints `ready N` and holds them, idle, until stdin
closes. Last it prints `open M`: how many the server had not closed meanwhile.
"""

from __future__ import annotations

import asyncio
import sys

_REQUEST = (
    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    "Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{{}}"
)


Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open(port: int) -> Connection:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_REQUEST.format(port=port).encode("latin-1"))
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            await reader.readexactly(int(value))
    return reader, writer


async def hold(port: int, count: int) -> int:
    held: list[Connection] = []
    for start in range(0, count, 50):  # 50 at a time: no burst the accept queue drops
        held += await asyncio.gather(*(_open(port) for _ in range(start, min(count, start + 50))))
    sys.stdout.write(f"ready {len(held)}\n")
    sys.stdout.flush()
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await asyncio.sleep(0)
    still_open = sum(1 for reader, _ in held if not reader.at_eof())
    for _, writer in held:
        writer.close()
    return still_open


def main() -> int:
    port, count = int(sys.argv[1]), int(sys.argv[2])
    still_open = asyncio.run(hold(port, count))
    sys.stdout.write(f"open {still_open}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
