"""The `elova-mcp` command: parse arguments, read configuration, run one operator command.

Each command lives in `service/cli/<name>.py` as `add_parser(subparsers)` + `run(args) -> int`.
A failure the operator can fix (a setting, a dependency) ends the command with one line on
stderr and exit status 2 or 1 (service/cli/failures.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from importlib import metadata

from service.cli.failures import explain, report

COMMANDS = ("serve", "migrate", "load", "approve", "account", "idp", "demo_data", "run_demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="elova-mcp", description="Read-only MCP server for retained Elova n8n metadata."
    )
    parser.add_argument("--version", action="version", version=f"elova-mcp {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name in COMMANDS:
        module = importlib.import_module(f"service.cli.{name}")
        module.add_parser(sub)
        modules[name.replace("_", "-")] = module
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as err:
        dsn = getattr(args, "database_url", None) or os.environ.get("ELOVA_DATABASE_URL")
        failure = explain(err, dsn)
        if failure is None:
            raise  # a bug: its traceback is the report
        return report(f"elova-mcp {args.command}", failure)


def _version() -> str:
    """The installed distribution's version (the package is always installed: pip, the
    image, `make install`); "unknown" for a bare source tree on sys.path."""
    try:
        return metadata.version("elova-mcp")
    except metadata.PackageNotFoundError:
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
