"""Paging and fitting: list pages within the response bound, and list cursors' anchors.

A result must stay within the response bound (`fits`): `fit_page` keeps the longest prefix
of rows whose whole result fits, and the caller returns a cursor for the rest. List cursors
of the inventory tools (workspaces, workflows) anchor on a row (`anchor_position`).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar
from uuid import UUID

import msgspec

from service.errors import CursorStale, ValidationError

R = TypeVar("R")
Page = TypeVar("Page", bound=msgspec.Struct)


def fits(structured: bytes, budget: int) -> bool:
    """Whether a result with this structuredContent stays within `budget` bytes.

    The result carries the JSON twice: as structuredContent and as a text block. Raw JSON
    from msgspec holds no control characters, so the text copy escapes only `"` and `\\`
    and is at most twice as long: most pages are decided without a second encoding.
    """
    if 3 * len(structured) <= budget:
        return True
    text = msgspec.json.encode(structured.decode("utf-8"))
    return len(structured) + len(text) <= budget


class Measure(Protocol):
    """What fitting needs of a call (service.tools.base.ToolContext)."""

    def encode(self, result: msgspec.Struct) -> bytes: ...

    def fits(self, structured: bytes) -> bool: ...


def fit_page(ctx: Measure, rows: Sequence[R], build: Callable[[int], Page]) -> Page:
    """The result for the longest prefix of `rows` within the response bound.

    `build(k)` makes the result holding the first k rows (with its nextCursor). Fitting is
    monotone in k, so a binary search needs a handful of encodings. At least one row is
    kept: every row is bounded far below the default 256 KiB, so only a configured bound
    smaller than one row could make that row exceed it, and an empty page with a cursor
    would never progress.
    """
    full = build(len(rows))
    if len(rows) <= 1 or ctx.fits(ctx.encode(full)):
        return full
    low, high = 1, len(rows) - 1  # `low` rows are kept even if they do not fit
    while low < high:
        middle = (low + high + 1) // 2
        if ctx.fits(ctx.encode(build(middle))):
            low = middle
        else:
            high = middle - 1
    return build(low)


# A list cursor's position is its anchor row: the id and a digest of the name it had. The
# name itself is not carried (names are stored whole and may be very long); the anchor's
# name is looked up again, and a deleted or renamed anchor means the retained records
# changed under the cursor: MCP_CURSOR_STALE.
def anchor_position(row_id: UUID, name: str) -> list[bytes]:
    return [row_id.bytes, _name_digest(name)]


def anchor_of(position: Sequence[object]) -> tuple[UUID, bytes]:
    """The anchor of a position this codec authenticated; VALIDATION_ERROR if misshapen."""
    if (
        len(position) != 2
        or not isinstance(position[0], bytes)
        or len(position[0]) != 16
        or not isinstance(position[1], bytes)
    ):
        raise ValidationError("`cursor` is not a cursor this tool issued.")
    return UUID(bytes=position[0]), position[1]


def check_anchor(stored_name: str | None, digest: bytes) -> str:
    """The anchor's current name, or MCP_CURSOR_STALE when it is gone or renamed."""
    if stored_name is None or not hmac.compare_digest(_name_digest(stored_name), digest):
        raise CursorStale()
    return stored_name


def _name_digest(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8")).digest()[:8]
