"""`elova-mcp serve`: run the service until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from service.app import create_app
from service.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("serve", help="serve MCP over streamable HTTP")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env()
    from service.logs import configure_logging

    configure_logging(cfg.log_level)
    app = create_app(cfg)
    # Readiness fails first on SIGTERM; in-flight requests get the deadline to finish.
    from service.health import serve

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(serve(app, cfg))
    return 0


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop (libuv): the same asyncio API with cheaper socket I/O, which is
    most of a tools/call's own cost (docs/decisions/scale.md). None (asyncio's default loop)
    where uvloop is not installed (it is a dependency on Linux and macOS only)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
