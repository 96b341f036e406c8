"""Admission limits (STUB: replaced by the limits work)."""

from __future__ import annotations

from aiohttp import web


def setup_limits(app: web.Application) -> None:
    pass
