"""The `elova-mcp` command: parse arguments, read configuration, run one operator command.

Each command lives in `service/cli/<name>.py` as `add_parser(subparsers)` + `run(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from service.config import ConfigError

COMMANDS = ("serve", "migrate", "load", "approve", "account", "demo_data", "run_demo")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="elova-mcp", description="Read-only MCP server for retained Elova n8n metadata."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {}
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"service.cli.{name}")
        except ModuleNotFoundError as err:
            if err.name == f"service.cli.{name}":
                continue  # not built yet
            raise
        module.add_parser(sub)
        modules[name.replace("_", "-")] = module
    args = parser.parse_args(argv)
    try:
        return int(modules[args.command].run(args))
    except ConfigError as err:
        print(f"elova-mcp: configuration error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
