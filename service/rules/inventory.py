"""The bounded node inventory of a workflow (docs/reading-rules.md), computed by the loader
when it stores the workflow.

The inventory is the longest stored-order prefix of at most 1000 nodes whose compact UTF-8
JSON (non-ASCII not escaped, msgspec's encoding) is at most 32 KiB. `get_workflow` embeds
the stored text as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

MAX_NODES = 1000
MAX_INVENTORY_BYTES = 32 * 1024
NODE_STRING_LIMITS = {"id": 1000, "name": 1000, "type": 300}  # the output schema's maxLength


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
