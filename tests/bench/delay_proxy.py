"""A loopback TCP proxy that delivers every chunk `--delay-ms` late in each direction (the
tests' own `TcpProxy` with a delay): a dependency one network hop away, for benchmarks.

    python -m tests.bench.delay_proxy --port 16400 --target 127.0.0.1:6379 --delay-ms 0.5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys

from tests.support.tcp_proxy import TcpProxy


async def serve(port: int, host: str, target_port: int, delay: float) -> None:
    proxy = TcpProxy(host, target_port, delay=delay)
    proxy.port = port
    await proxy.start()
    await asyncio.Event().wait()  # until the process is stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.delay_proxy")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--target", required=True, help="host:port")
    parser.add_argument("--delay-ms", type=float, required=True, help="each way")
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port, host, int(port), args.delay_ms / 1000))
    return 0


if __name__ == "__main__":
    sys.exit(main())
