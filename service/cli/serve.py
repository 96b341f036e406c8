"""`elova-mcp serve`: run the service until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse

from aiohttp import web

from service.app import create_app
from service.config import Config


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sub.add_parser("serve", help="serve MCP over streamable HTTP")


def run(args: argparse.Namespace) -> int:
    cfg = Config.from_env()
    from service.logs import configure_logging

    configure_logging(cfg.log_level)
    app = create_app(cfg)
    # Readiness fails first on shutdown; in-flight requests get the drain time to finish.
    web.run_app(
        app,
        host=cfg.host,
        port=cfg.port,
        print=None,
        access_log=None,
        shutdown_timeout=cfg.limits.request_deadline_seconds + 5,
        handle_signals=True,
    )
    return 0
