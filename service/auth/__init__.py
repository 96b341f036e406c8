"""Authorization: access tokens, the bearer check on /mcp, approvals, and (later) OAuth."""

from __future__ import annotations

from aiohttp import web


def setup_auth(app: web.Application) -> None:
    """STUB: replaced by the authorization work."""
