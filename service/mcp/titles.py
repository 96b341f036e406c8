"""What clients show: each tool's human-readable `title` and the server's identity.

The catalog (`elova-tools.json`) is the product contract and is served exactly as it is;
the titles live here and are merged into `tools/list` as the top-level `title` MCP defines
(clients show it instead of the name). `SERVER_TITLE`, `WEBSITE_URL` and `ICON` complete
`serverInfo` in `initialize` and in the `_meta` of every 2026-07-28 result. The icon is an
inline SVG (a `data:` URI), so it needs no public URL and no extra route.
"""

from __future__ import annotations

import base64
from typing import Any

TOOL_TITLES = {
    "get_many_workspaces": "List workspaces",
    "get_workspace": "Get workspace",
    "get_many_instances": "List n8n instances",
    "get_execution_stats": "Execution statistics",
    "get_many_sync_jobs": "List sync jobs",
    "get_many_executions": "List executions",
    "get_execution": "Get execution",
    "get_many_workflows": "List workflows",
    "get_workflow": "Get workflow",
}

SERVER_TITLE = "Elova"
WEBSITE_URL = "https://docs.elova.dev/"
_ICON_SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 64 64">'
    '<rect width="64" height="64" rx="14" fill="#1f4e79"/>'
    '<path d="M20 16h24v7H28v6h14v7H28v5h16v7H20z" fill="#fff"/></svg>'
)
ICON: dict[str, Any] = {
    "src": "data:image/svg+xml;base64," + base64.b64encode(_ICON_SVG.encode()).decode(),
    "mimeType": "image/svg+xml",
    "sizes": ["any"],
}


def tool_title(name: str) -> str:
    """The tool's title; a tool added to the catalog without one shows its name in words."""
    return TOOL_TITLES.get(name) or name.replace("_", " ").capitalize()
