"""Identifier patterns: the output schema's UUID pattern, which the loader checks every
stored id against (or no tool could return it) and the tools' arguments are validated by."""

from __future__ import annotations

from uuid import UUID

from asyncpg.pgproto.pgproto import UUID as _StoreUUID

# Patterns end in \Z, not $: Python's $ also matches before a final newline (ECMA's does not).
UUID_PATTERN = (
    r"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}"
    r"|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)\Z"
)


def parse_id(text: str) -> UUID:
    """`uuid.UUID(text)` for an id in its canonical or plain-hex form (ValueError
    otherwise, TypeError for a non-string), made as asyncpg's own UUID: a subclass of
    `uuid.UUID` that is equal, hashes and orders as the standard one, whose str, hash and
    bytes run in C. The standard one's `str` runs ~40 Python opcodes and its hash ~5, and
    a tools/call reads its caller's and its workspace's ids ~20 times (the access and audit
    lines, the admission's keys, the limiter's maps); ids read from the store are of this
    type already."""
    made: UUID = _StoreUUID(text)
    return made
