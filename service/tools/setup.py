"""The tools of an app: every tool by name (what the catalog binds), and what they need
beyond the pool, the cursor codec."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from service.app_keys import CONFIG, CURSORS
from service.tools.base import Tool
from service.tools.cursors import CursorCodec, derive_cursor_key


def all_tools() -> dict[str, Tool[Any]]:
    """Every tool by name, in catalog order. Modules are imported here, not at import time."""
    from service.tools import executions, instances, stats, sync_jobs, workflows, workspaces

    found: dict[str, Tool[Any]] = {}
    for module in (workspaces, instances, stats, sync_jobs, executions, workflows):
        for tool in module.TOOLS:
            found[tool.name] = tool
    return found


def setup_tools(app: web.Application) -> None:
    cfg = app[CONFIG]
    app[CURSORS] = CursorCodec(
        derive_cursor_key(cfg.signing_key_pem),
        [derive_cursor_key(pem) for pem in cfg.previous_signing_keys_pem],
    )
