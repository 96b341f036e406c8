"""`elova-mcp serve`: run the service until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio

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

    asyncio.run(serve(app, cfg))
    return 0
