"""The tool catalog served by `tools/list`: elova-tools.json, parsed and encoded once.

The file beside this module is the product contract (docs/tools.md documents it);
`tools/list` answers exactly its tools, in its order, with the five members the file has and
the top-level `title` of `titles.py`, and on the tools a view renders the MCP Apps `_meta.ui`
(service/mcp/views/resources.py); the file itself is never changed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import msgspec
from msgspec import UNSET, UnsetType

from service.contract.catalog_file import catalog_bytes
from service.mcp.titles import tool_title
from service.mcp.views.resources import BY_TOOL
from service.tools.base import Tool

log = logging.getLogger(__name__)


class CatalogTool(msgspec.Struct, rename="camel"):
    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: dict[str, Any]


class ServedTool(msgspec.Struct, rename="camel", omit_defaults=True):
    """A tool as `tools/list` serves it: the catalog's members plus its title, and the
    `_meta.ui` naming its view when it has one."""

    name: str
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    annotations: dict[str, Any]
    meta: dict[str, Any] | UnsetType = msgspec.field(default=UNSET, name="_meta")


def served(tool: CatalogTool) -> ServedTool:
    view = BY_TOOL.get(tool.name)
    return ServedTool(
        name=tool.name,
        title=tool_title(tool.name),
        description=tool.description,
        input_schema=tool.input_schema,
        output_schema=tool.output_schema,
        annotations=tool.annotations,
        meta=UNSET if view is None else view.tool_meta(),
    )


class _Document(msgspec.Struct):
    tools: list[CatalogTool]


class Catalog:
    """The tools in catalog order and their pre-encoded `tools` array."""

    def __init__(self, document: bytes) -> None:
        parsed = msgspec.json.decode(document, type=_Document)
        self.tools: tuple[CatalogTool, ...] = tuple(parsed.tools)
        self.names: tuple[str, ...] = tuple(t.name for t in self.tools)
        # Encoded once: every tools/list embeds these bytes as they are.
        self.tools_json = msgspec.Raw(msgspec.json.encode([served(t) for t in self.tools]))
        self.implementations: dict[str, Tool[Any]] = {}

    @classmethod
    def load(cls) -> Catalog:
        return cls(catalog_bytes())

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def bind(self, implemented: Mapping[str, Tool[Any]], *, self_authorizing: bool = True) -> None:
        """Attach the tool modules' implementations; log (once, at start) any drift.
        `self_authorizing=False` (reads go to a replica): no tool confirms the approval in
        its own statement, so the transport reads it on the primary for every call."""
        self.implementations = {
            n: implemented[n] if self_authorizing else replace(implemented[n], authorizes=False)
            for n in self.names
            if n in implemented
        }
        missing = [n for n in self.names if n not in implemented]
        extra = sorted(set(implemented) - set(self.names))
        if missing:
            log.warning("catalog tools without an implementation: %s", ", ".join(missing))
        if extra:
            log.warning("implemented tools missing from the catalog (not served): %s", extra)

    def tool(self, name: str) -> Tool[Any] | None:
        return self.implementations.get(name)
