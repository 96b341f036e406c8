"""`elova-mcp serve`: check what the start needs, then run the service until SIGTERM/SIGINT.

The checks (service/cli/preflight.py) come before the app is built: a port in use, a
database that refuses, a Redis password that is wrong each stop the start with one line
(service/cli/failures.py), not with a traceback from inside the app's start-up.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
from collections.abc import Callable

from service.app import create_app
from service.cli.preflight import check_dependencies, check_listeners
from service.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("serve", help="serve MCP over streamable HTTP")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env()
    from service.observability.logs import configure_logging

    configure_logging(cfg.log_level)
    check_listeners(cfg)
    # Readiness fails first on SIGTERM; in-flight requests get the deadline to finish.
    from service.server.listener import serve

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(check_dependencies(cfg))
        app = create_app(cfg)
        tune_gc()
        runner.run(serve(app, cfg))
    return 0


# A young-generation collection after this many net container allocations (CPython's default
# is 700: a 50-row page allocates thousands, so the collector ran several times a request).
GC_YOUNG_THRESHOLD = 20_000
GC_OLDER_THRESHOLDS = (20, 20)


def tune_gc() -> None:
    """Fewer, cheaper garbage collections for a request server: what a request allocates
    dies with it (reference counting frees it; the collector only finds cycles), so the
    young generation is collected far less often, and everything alive at start (modules,
    the app) is frozen out of every later collection: less server CPU a tools/call and a
    shorter p99 (docs/decisions/scale.md)."""
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *GC_OLDER_THRESHOLDS)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop (libuv): the same asyncio API with cheaper socket I/O, which is
    most of a tools/call's own cost (docs/decisions/scale.md). None (asyncio's default loop)
    where uvloop is not installed (it is a dependency on Linux and macOS only)."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
