"""A loopback TCP proxy that delivers every chunk `--delay-ms` late in each direction: a
dependency one network hop away (a Redis in another zone, say), for benchmarks only.

    python -m tests.bench.delay_proxy --port 16400 --target 127.0.0.1:6379 --delay-ms 0.5

Order is kept: every chunk waits the same delay on the same monotonic clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, asyncio.CancelledError):
        while data := await src.read(65536):
            loop.call_later(delay, dst.write, data)
    loop.call_later(delay, dst.close)


async def serve(port: int, target: tuple[str, int], delay: float) -> None:
    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target)
        await asyncio.gather(_pipe(reader, up_writer, delay), _pipe(up_reader, writer, delay))

    server = await asyncio.start_server(accept, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.delay_proxy")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True, help="host:port")
    parser.add_argument("--delay-ms", type=float, required=True, help="each way")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, (host, int(port)), args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
