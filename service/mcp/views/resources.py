"""The `ui://` resources: a view's uri, the tool it renders, its `resources/list` entry and
its `resources/read` content (text/html;profile=mcp-app, no external origin). All three
return the same self-contained document, built/views.html, which picks its view at run
time (docs/views.md); package data built from src/, read once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

EXTENSION = "io.modelcontextprotocol/ui"
MIME_TYPE = "text/html;profile=mcp-app"
# The extension's server settings, as server/discover and initialize declare them.
EXTENSION_SETTINGS: dict[str, Any] = {"mimeTypes": [MIME_TYPE]}
# No external origin at all: the host's restrictive default CSP (no connect, no resources).
CSP: dict[str, list[str]] = {
    "connectDomains": [],
    "resourceDomains": [],
    "frameDomains": [],
    "baseUriDomains": [],
}
CONTENT_META: dict[str, Any] = {"ui": {"csp": CSP, "prefersBorder": True}}
# The one document (in built/) behind every view.
DOCUMENT = "views.html"


@dataclass(frozen=True)
class View:
    uri: str
    tool: str  # the catalog tool whose results it renders
    name: str
    title: str
    description: str
    visibility: tuple[str, ...]  # who may call `tool` (the extension's `_meta.ui.visibility`)

    def listed(self) -> dict[str, Any]:
        """The `resources/list` entry."""
        return {
            "uri": self.uri,
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "mimeType": MIME_TYPE,
        }

    def tool_meta(self) -> dict[str, Any]:
        """The `_meta` its tool carries in tools/list."""
        return {"ui": {"resourceUri": self.uri, "visibility": list(self.visibility)}}

    def content(self) -> dict[str, Any]:
        """The one item of its `resources/read` contents."""
        return {
            "uri": self.uri,
            "mimeType": MIME_TYPE,
            "text": html(),
            "_meta": CONTENT_META,
        }


# "app" in a visibility: the executions table calls get_execution (a row opens it) and
# get_many_executions (its "More"); the chart calls nothing.
VIEWS: tuple[View, ...] = (
    View(
        "ui://elova-mcp/execution.html", "get_execution", "execution_timeline",
        "Execution timeline", "One execution: its node runs in order on a timeline, the "
        "failing run marked, the diagnostic text and the model-token reference costs.",
        ("model", "app"),
    ),
    View(
        "ui://elova-mcp/execution-stats.html", "get_execution_stats", "execution_stats_chart",
        "Execution statistics chart", "The period's buckets as a chart of succeeded, "
        "failed and other executions, with the totals.", ("model",),
    ),
    View(
        "ui://elova-mcp/executions.html", "get_many_executions", "executions_table",
        "Executions table", "A page of executions as a table; a row opens its execution, "
        '"More" follows the next cursor.', ("model", "app"),
    ),
)  # fmt: skip
BY_URI: dict[str, View] = {view.uri: view for view in VIEWS}
BY_TOOL: dict[str, View] = {view.tool: view for view in VIEWS}


@cache
def html() -> str:
    return resources.files("service.mcp.views").joinpath("built", DOCUMENT).read_text("utf-8")
