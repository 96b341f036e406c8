"""What the inventory tools share: the bounded node inventory and fitting a list page.

The node inventory (SEMANTICS §2, §9) is computed once, at load time: the longest
stored-order prefix of at most 1000 nodes whose compact UTF-8 JSON (non-ASCII not escaped,
msgspec's encoding) is at most 32 KiB. `get_workflow` embeds the stored text as is.

A list page must stay within the response bound: `fit_page` keeps the longest prefix of
rows whose whole result fits, and the caller returns a cursor for the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from service.tools.base import Output, ToolContext

MAX_NODES = 1000
MAX_INVENTORY_BYTES = 32 * 1024
NODE_STRING_LIMITS = {"id": 1000, "name": 1000, "type": 300}  # the output schema's maxLength

R = TypeVar("R")


class InventoryNode(msgspec.Struct):
    """One node as get_workflow returns it; field order is the output's key order."""

    id: str
    name: str
    type: str
    typeVersion: int | float | None
    disabled: bool


_encode = msgspec.json.Encoder().encode


def bound_inventory(nodes: Sequence[InventoryNode]) -> tuple[str, bool]:
    """(compact JSON of the longest fitting prefix, whether nodes were left out)."""
    size = 2  # "[" and "]"
    parts: list[bytes] = []
    for node in nodes[:MAX_NODES]:
        encoded = _encode(node)
        extra = len(encoded) + (1 if parts else 0)  # the separating comma
        if size + extra > MAX_INVENTORY_BYTES:
            break
        parts.append(encoded)
        size += extra
    text = (b"[" + b",".join(parts) + b"]").decode("utf-8")
    return text, len(parts) < len(nodes)


def fit_page(ctx: ToolContext, rows: Sequence[R], build: Callable[[int], Output]) -> Output:
    """The result for the longest prefix of `rows` within the response bound.

    `build(k)` makes the result holding the first k rows (with its nextCursor). Fitting is
    monotone in k, so a binary search needs a handful of encodings. At least one row is
    kept: every row is bounded far below the default 256 KiB, so only a configured bound
    smaller than one row could make that row exceed it, and an empty page with a cursor
    would never progress.
    """
    full = build(len(rows))
    if len(rows) <= 1 or ctx.fits(_encode(full)):
        return full
    low, high = 1, len(rows) - 1  # `low` rows are kept even if they do not fit
    while low < high:
        middle = (low + high + 1) // 2
        if ctx.fits(_encode(build(middle))):
            low = middle
        else:
            high = middle - 1
    return build(low)
