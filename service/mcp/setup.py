"""MCP over streamable HTTP of an app: the catalog bound to the tools, sessions, and the
`/mcp` endpoint (docs/protocol.md)."""

from __future__ import annotations

from aiohttp import web

from service.app_keys import CATALOG, CONFIG, SESSIONS
from service.edge.paths import MCP_PATH


def setup_mcp(app: web.Application) -> None:
    from service.mcp.catalog import Catalog
    from service.mcp.sessions import SessionStore, derive_session_key
    from service.mcp.transport import handle
    from service.tools.setup import all_tools

    cfg = app[CONFIG]
    catalog = Catalog.load()
    # With a read replica the approval is never confirmed by a tool's own statement, which
    # would read it on a possibly lagging standby (docs/decisions/engines.md).
    catalog.bind(all_tools(), self_authorizing=cfg.database_read_url is None)
    app[CATALOG] = catalog
    app[SESSIONS] = SessionStore(
        derive_session_key(cfg.signing_key_pem),
        [derive_session_key(pem) for pem in cfg.previous_signing_keys_pem],
        lookup_timeout_seconds=cfg.limits.request_deadline_seconds,
    )
    app.router.add_route("*", MCP_PATH, handle)
