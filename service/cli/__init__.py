"""Operator commands, one module each: `add_parser(subparsers)` and `run(args) -> int`.
Modules: docs/architecture.md."""
