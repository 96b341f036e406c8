"""The nine read-only tools: one module a tool family, each exporting `TOOLS`."""

from __future__ import annotations

from typing import Any

from service.tools.base import Tool


def all_tools() -> dict[str, Tool[Any]]:
    """Every tool by name, in catalog order. Modules are imported here, not at import time."""
    from service.tools import executions, instances, stats, sync_jobs, workflows, workspaces

    found: dict[str, Tool[Any]] = {}
    for module in (workspaces, instances, stats, sync_jobs, executions, workflows):
        for tool in module.TOOLS:
            found[tool.name] = tool
    return found
