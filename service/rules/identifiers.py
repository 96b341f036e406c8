"""Identifier patterns: the output schema's UUID pattern, which the loader checks every
stored id against (or no tool could return it) and the tools' arguments are validated by."""

from __future__ import annotations

# Patterns end in \Z, not $: Python's $ also matches before a final newline (ECMA's does not).
UUID_PATTERN = (
    r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
    r"|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)\Z"
)
