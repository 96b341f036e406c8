"""Registers what the tools need beyond the pool: the cursor codec."""

from __future__ import annotations

from aiohttp import web

from service.keys import CONFIG, CURSORS
from service.tools.cursors import CursorCodec, derive_cursor_key


def setup_tools(app: web.Application) -> None:
    cfg = app[CONFIG]
    app[CURSORS] = CursorCodec(
        derive_cursor_key(cfg.signing_key_pem),
        [derive_cursor_key(pem) for pem in cfg.previous_signing_keys_pem],
    )
