"""Tool family module (STUB: filled in by the tools work)."""

from __future__ import annotations

from typing import Any

from service.tools.base import Tool

TOOLS: list[Tool[Any]] = []
